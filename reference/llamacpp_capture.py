"""llama.cpp's own intermediates, through llama-cpp-python: a ggml eval
callback that keeps every contiguous f32 tensor a forward pass computes
(attn_norm-N, Qcur-N, kqv_out-N, ffn_out-N, l_out-N, result_output, ...),
and a way to change llama-cpp-python's default model and context parameters
for one load. Used by the op-by-op checks (llamacpp_emulation_check.py,
gemma3_llamacpp_opcheck.py) and make_reference.py; needs llama_cpp and
numpy, imported only when called.
"""

from __future__ import annotations

import contextlib
import ctypes

import numpy as np


class GgmlTensor(ctypes.Structure):
    # mirrors struct ggml_tensor in ggml.h (GGML_MAX_DIMS 4, GGML_MAX_SRC 10,
    # GGML_MAX_OP_PARAMS 64, GGML_MAX_NAME 64) of the vendored llama.cpp
    _fields_ = [
        ("type", ctypes.c_int), ("buffer", ctypes.c_void_p), ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int), ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32), ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p), ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p), ("padding", ctypes.c_char * 8),
    ]


@contextlib.contextmanager
def patched_defaults(model=None, context=None):
    """While open, llama-cpp-python's default model and context parameters
    are passed through `model(p)` / `context(p)` (each edits `p` in place)
    before a `Llama` takes them; the originals are restored after."""
    import llama_cpp
    import llama_cpp.llama as _ll

    orig_m, orig_c = llama_cpp.llama_model_default_params, llama_cpp.llama_context_default_params

    def wrap(orig, edit):
        def params():
            p = orig()
            if edit is not None:
                edit(p)
            return p

        return params

    _ll.llama_cpp.llama_model_default_params = wrap(orig_m, model)
    _ll.llama_cpp.llama_context_default_params = wrap(orig_c, context)
    try:
        yield
    finally:
        _ll.llama_cpp.llama_model_default_params = orig_m
        _ll.llama_cpp.llama_context_default_params = orig_c


def no_extra_bufts(p):
    """A model-parameter edit: weights stay in the file's layout (no CPU repacking)."""
    p.use_extra_bufts = False


def capture(model_path: str, ids, *, model_params=None, **llama_kwargs):
    """Runs llama.cpp on `ids` in one batch (f32 KV cache, flash attention
    off unless `llama_kwargs` say otherwise) and returns ({tensor name:
    [float64 arrays in eval order]}, the logits of every position)."""
    import llama_cpp

    cap: dict[str, list] = {}

    @llama_cpp.ggml_backend_sched_eval_callback
    def cb(t, ask, _ud):
        if ask:
            return True
        tt = ctypes.cast(t, ctypes.POINTER(GgmlTensor)).contents
        ne = [int(v) for v in tt.ne]
        contiguous = tt.nb[1] == 4 * ne[0] and tt.nb[2] == tt.nb[1] * ne[1] and tt.nb[3] == tt.nb[2] * ne[2]
        if tt.type == 0 and contiguous:  # f32
            n = ne[0] * ne[1] * ne[2] * ne[3]
            arr = np.ctypeslib.as_array(ctypes.cast(tt.data, ctypes.POINTER(ctypes.c_float)), shape=(n,))
            cap.setdefault(tt.name.decode(), []).append(arr.astype(np.float64).reshape(ne[::-1]))
        return True

    def set_callback(p):
        p.cb_eval = cb

    kwargs = dict(logits_all=True, verbose=False, type_k=0, type_v=0, flash_attn=False)
    kwargs.update(llama_kwargs)
    with patched_defaults(model=model_params, context=set_callback):
        ll = llama_cpp.Llama(model_path=model_path, **kwargs)
        ll.eval(ids)
        logits = np.array(ll.scores[: len(ids)], dtype=np.float64)
    return cap, logits
