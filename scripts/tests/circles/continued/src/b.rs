pub struct Thing;

pub fn g() -> &'static str {
    crate::a::MESSAGE
}
