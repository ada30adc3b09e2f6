//! The OpenAI-shaped error every refusal of the server is sent as:
//! `{"error": {"message", "type", "param", "code"}}` with its HTTP status
//! (and `Retry-After` when the server is busy).
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A refusal, sent as `{"error": {"message", "type", "param", "code"}}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `not_found_error`, `server_error`, ...
    pub kind: &'static str,
    /// The request field at fault, when one is.
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    pub fn invalid(message: impl Into<String>, param: Option<&str>, code: &'static str) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_string),
            code: Some(code),
        }
    }

    pub fn unsupported(param: &str, why: &str) -> Self {
        ApiError::invalid(
            format!("{param} is not supported by this server: {why}"),
            Some(param),
            "unsupported_parameter",
        )
    }

    pub fn model_not_found(asked: &str, served: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("the model {asked:?} does not exist here; this server serves {served:?} (GET /v1/models)"),
            kind: "invalid_request_error",
            param: Some("model".into()),
            code: Some("model_not_found"),
        }
    }

    pub fn too_large(limit: usize) -> Self {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            message: format!("the request body is larger than this server's limit of {limit} bytes (--max-body-bytes)"),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_too_large"),
        }
    }

    /// The wait queue is full: the client should retry later.
    pub fn queue_full(capacity: usize) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!(
                "the server is busy: {capacity} requests are already waiting (--max-queue); retry in a moment"
            ),
            kind: "server_error",
            param: None,
            code: Some("queue_full"),
        }
    }

    /// Every open connection has a request running (`--max-connections`).
    pub fn too_many_connections(max: usize) -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: format!(
                "the server has {max} open connections, each with a request running (--max-connections); \
                 retry in a moment"
            ),
            kind: "server_error",
            param: None,
            code: Some("too_many_connections"),
        }
    }

    /// The request head did not arrive in time (`--header-timeout-ms`).
    pub fn header_timeout(limit: std::time::Duration) -> Self {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request line and headers did not arrive within {} ms (--header-timeout-ms)",
                limit.as_millis()
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_timeout"),
        }
    }

    /// The request body did not arrive in time (`--body-timeout-ms`).
    pub fn body_timeout(limit: std::time::Duration) -> Self {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request body did not arrive within {} ms of its headers (--body-timeout-ms)",
                limit.as_millis()
            ),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_timeout"),
        }
    }

    /// An unfinished request head or body was dropped to admit a new connection.
    pub fn evicted() -> Self {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: "the request (its headers or its body) was still incomplete when the server, at its \
                      connection limit (--max-connections), needed the connection for another client"
                .into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("request_timeout"),
        }
    }

    /// The request ran past its deadline (`--request-timeout-secs`).
    pub fn deadline(limit: std::time::Duration) -> Self {
        ApiError {
            status: StatusCode::REQUEST_TIMEOUT,
            message: format!(
                "the request did not finish within {} s (--request-timeout-secs); ask for fewer tokens or a \
                 shorter prompt",
                limit.as_secs()
            ),
            kind: "server_error",
            param: None,
            code: Some("request_timeout"),
        }
    }

    /// The request's prompt and budget need more cache positions than the
    /// server's whole cache budget (`--kv-budget-mb`): it could never run.
    pub fn kv_budget(need: usize, budget: usize) -> Self {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!(
                "the prompt and max_tokens need {need} cache positions, more than the server's whole cache budget \
                 of {budget} (--kv-budget-mb); ask for fewer tokens or a shorter prompt"
            ),
            kind: "invalid_request_error",
            param: Some("max_tokens".into()),
            code: Some("kv_budget_exceeded"),
        }
    }

    /// Too many requests are being tokenized or waiting to be (`--max-preparing`).
    pub fn too_many_preparing(max: usize, waiting: usize) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "too many requests are being prepared at once ({max} tokenizing (--max-preparing) and {waiting} \
                 waiting to (--max-queue)); retry in a moment"
            ),
            kind: "rate_limit_error",
            param: None,
            code: Some("too_many_requests"),
        }
    }

    /// The client already has its share of requests waiting (`--max-waiting-per-client`).
    pub fn over_client_share(waiting: usize, max: usize) -> Self {
        ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "this client already has {waiting} requests waiting, its share of the queue \
                 (--max-waiting-per-client {max}); retry when one of them has started"
            ),
            kind: "rate_limit_error",
            param: None,
            code: Some("too_many_requests"),
        }
    }

    /// `--api-key` is set and the request did not give it.
    pub fn unauthorized() -> Self {
        ApiError {
            status: StatusCode::UNAUTHORIZED,
            message: "a valid API key is required: send the header `Authorization: Bearer <key>` with the key \
                      the server was started with (--api-key)"
                .into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("invalid_api_key"),
        }
    }

    pub fn shutting_down() -> Self {
        ApiError {
            status: StatusCode::SERVICE_UNAVAILABLE,
            message: "the server is shutting down".into(),
            kind: "server_error",
            param: None,
            code: Some("shutting_down"),
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            message: message.into(),
            kind: "server_error",
            param: None,
            code: Some("internal_error"),
        }
    }

    pub fn not_found(what: &str) -> Self {
        ApiError {
            status: StatusCode::NOT_FOUND,
            message: format!("{what} does not exist on this server"),
            kind: "not_found_error",
            param: None,
            code: Some("not_found"),
        }
    }

    pub fn method_not_allowed() -> Self {
        ApiError {
            status: StatusCode::METHOD_NOT_ALLOWED,
            message: "this method is not allowed on this path".into(),
            kind: "invalid_request_error",
            param: None,
            code: Some("method_not_allowed"),
        }
    }

    /// The `{"error": {...}}` body.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (self.status, [(axum::http::header::CONTENT_TYPE, "application/json")], self.body().to_string())
            .into_response();
        if self.status == StatusCode::SERVICE_UNAVAILABLE || self.status == StatusCode::TOO_MANY_REQUESTS {
            r.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from_static("1"));
        }
        r
    }
}
