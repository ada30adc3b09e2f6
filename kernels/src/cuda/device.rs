//! The CUDA device: context, stream and loaded kernels, with one typed
//! launch method per kernel of `kernels/cuda/`.
//!
//! Buffers are cudarc `CudaSlice`s on the device's one stream; launches are
//! asynchronous and ordered by that stream, so a caller reads results with
//! [`CudaDevice::download`], which waits. cudarc's per-buffer event tracking
//! is turned off: with a single stream it only adds work.
//!
//! Shapes are checked here (a wrong shape is a programming error and
//! panics, as in the CPU kernels); device failures are [`CudaError`]s.

use super::dispatch::{CUDA_ROWS_PER_PASS, matvec_kernel_name, matvec8_kernel_name, passes};
use super::nvrtc::{self, Output};
use super::{CudaError, DeviceInfo};
use crate::matvec::{Matrix, Weights};
use crate::quant::{GgmlType, QK, QK_K};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut,
    DeviceRepr, DriverError, LaunchConfig, PushKernelArg, ValidAsZeroBits,
};
use std::collections::HashMap;
use std::sync::Arc;

fn drv(e: DriverError) -> CudaError {
    CudaError::Driver(format!("{e:?}"))
}

/// Threads per block of the mat-vec and quantize kernels (`MV_WARPS` warps
/// of `common.cuh`, one output row or block per warp).
const MV_THREADS: u32 = 128;
const MV_WARPS: u32 = MV_THREADS / 32;
const NORM_THREADS: u32 = 256;
const ATT_THREADS: u32 = 128;
const ARGMAX_THREADS: u32 = 1024;
const ELEMWISE_THREADS: u32 = 256;

/// Every entry point of the program, loaded once.
pub fn kernel_names() -> Vec<String> {
    let mut v: Vec<String> =
        ["quantize_act", "quantize_act8", "rmsnorm", "rope", "swiglu", "add_inplace", "argmax", "attention"]
            .map(String::from)
            .into();
    for f in MATVEC_FORMATS {
        v.push(format!("embed_{f}"));
        for nr in 1..=CUDA_ROWS_PER_PASS {
            v.push(matvec_kernel_name(f, nr));
        }
    }
    for f in INT8_FORMATS {
        for nr in 1..=CUDA_ROWS_PER_PASS {
            v.push(matvec8_kernel_name(f, nr));
        }
    }
    v
}

/// The formats with 8-bit activation mat-vec kernels
/// (`matvec_<fmt>_q8_k_r<NR>`, [`Precision::Int8`](crate::act8::Precision)):
/// the K-quants the device has at all. (Q5_K, which the CPU also runs at 8
/// bits, has no CUDA kernel at any precision: such a model stays on the CPU.)
pub const INT8_FORMATS: [&str; 2] = ["q4_k", "q6_k"];

/// The formats with CUDA mat-vec and embedding kernels, by kernel name.
pub const MATVEC_FORMATS: [&str; 8] = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "q4_k", "q6_k", "f32"];

fn format_name(ty: GgmlType) -> Result<&'static str, CudaError> {
    Ok(match ty {
        GgmlType::Q4_0 => "q4_0",
        GgmlType::Q4_1 => "q4_1",
        GgmlType::Q5_0 => "q5_0",
        GgmlType::Q5_1 => "q5_1",
        GgmlType::Q8_0 => "q8_0",
        GgmlType::Q4K => "q4_k",
        GgmlType::Q6K => "q6_k",
        GgmlType::F32 => "f32",
        other => return Err(CudaError::Unsupported(other.name())),
    })
}

/// The storage type of a CPU weight view.
fn weights_type(w: &Weights) -> GgmlType {
    match w {
        Weights::Q4_0(_) => GgmlType::Q4_0,
        Weights::Q4_1(_) => GgmlType::Q4_1,
        Weights::Q5_0(_) => GgmlType::Q5_0,
        Weights::Q5_1(_) => GgmlType::Q5_1,
        Weights::Q8_0(_) => GgmlType::Q8_0,
        Weights::Q2K(_) => GgmlType::Q2K,
        Weights::Q3K(_) => GgmlType::Q3K,
        Weights::Q4K(_) => GgmlType::Q4K,
        Weights::Q6K(_) => GgmlType::Q6K,
        Weights::F32(_) => GgmlType::F32,
        Weights::F16(_) => GgmlType::F16,
        Weights::BF16(_) => GgmlType::BF16,
        Weights::Q5K(_) => GgmlType::Q5K,
        Weights::R16(v) => v.fmt.ggml_type(),
    }
}

/// Whether the CUDA backend multiplies matrices of type `ty` (it has their
/// mat-vec and embedding kernels); the others (Q5_K, Q2_K, Q3_K, F16, BF16)
/// are refused by name at upload. Needs no device.
pub fn supports_format(ty: GgmlType) -> Result<(), CudaError> {
    format_name(ty).map(|_| ())
}

/// Checks for the driver and NVRTC (never panics), then opens device
/// `ordinal` and reads what `startup` reports.
pub fn probe(ordinal: usize) -> Result<DeviceInfo, CudaError> {
    // SAFETY: only tries to open libcuda by its candidate names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(CudaError::NoDriver);
    }
    nvrtc::ensure_loaded()?;
    let ctx = CudaContext::new(ordinal).map_err(|e| CudaError::NoDevice { ordinal, msg: format!("{e:?}") })?;
    info_of(&ctx, ordinal)
}

fn info_of(ctx: &Arc<CudaContext>, ordinal: usize) -> Result<DeviceInfo, CudaError> {
    let mut driver_version = 0;
    // SAFETY: the driver is loaded (a context exists); valid out-pointer.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }.result().map_err(drv)?;
    Ok(DeviceInfo {
        ordinal,
        name: ctx.name().map_err(drv)?,
        compute_capability: ctx.compute_capability().map_err(drv)?,
        driver_version,
        nvrtc_version: nvrtc::version()?,
        total_mem: ctx.total_mem().map_err(drv)?,
    })
}

/// A weight matrix on the device: the file's block bytes as they are, or f32.
#[derive(Debug)]
pub struct DevMatrix {
    pub ty: GgmlType,
    pub rows: usize,
    pub cols: usize,
    data: DevData,
}

#[derive(Debug)]
enum DevData {
    Blocks(CudaSlice<u8>),
    F32(CudaSlice<f32>),
}

impl DevMatrix {
    /// Whether products read the quantized activation (as
    /// [`Matrix::wants_quantized_input`]).
    pub fn wants_quantized_input(&self) -> bool {
        matches!(self.data, DevData::Blocks(_))
    }

    /// Whether this matrix multiplies 8-bit activations at
    /// [`Precision::Int8`](crate::act8::Precision) (as
    /// [`Matrix::takes_int8`]): Q4_K and Q6_K, the device's K-quants.
    pub fn takes_int8(&self) -> bool {
        matches!(self.ty, GgmlType::Q4K | GgmlType::Q6K)
    }

    /// Device bytes held.
    pub fn bytes(&self) -> usize {
        match &self.data {
            DevData::Blocks(b) => b.len(),
            DevData::F32(f) => f.len() * 4,
        }
    }
}

/// The bytes of a quantized weight slice.
fn block_bytes<T>(w: &[T]) -> &[u8] {
    // SAFETY: the block structs are #[repr(C)] plain old data with no
    // padding (size assertions in quant::blocks); the byte view covers
    // exactly the same memory and borrows it.
    unsafe { std::slice::from_raw_parts(w.as_ptr().cast::<u8>(), std::mem::size_of_val(w)) }
}

/// A block of `rows` activation rows of `cols` elements quantized for the
/// mat-vec kernels: `q` (rows, cols) int16, `d` and `s` (rows, cols / 32).
pub struct QuantView<'a> {
    pub q: CudaView<'a, i16>,
    pub d: CudaView<'a, f32>,
    pub s: CudaView<'a, f32>,
}

/// A block of `rows` activation rows of `cols` elements (a multiple of 256)
/// quantized to 8 bits for the K-quant kernels, as [`crate::act8::ActRow8`]
/// row after row: `qs` (rows, cols) int8, `d` (rows, cols / 256),
/// `bsum16` (rows, cols / 16), `bsum32` (rows, cols / 32).
pub struct Quant8View<'a> {
    pub qs: CudaView<'a, i8>,
    pub d: CudaView<'a, f32>,
    pub bsum16: CudaView<'a, i16>,
    pub bsum32: CudaView<'a, i16>,
}

/// The device, its stream and the loaded kernels.
pub struct CudaDevice {
    pub info: DeviceInfo,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    /// The compiled image's target (`sm_XY`), cache file and whether it was a cache hit.
    pub image: nvrtc::Image,
    _module: Arc<CudaModule>,
    funcs: HashMap<String, CudaFunction>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice").field("info", &self.info).field("target", &self.image.target).finish()
    }
}

fn grid(n: usize, per_block: u32) -> u32 {
    u32::try_from(n.div_ceil(per_block as usize)).expect("grid fits u32")
}

fn int(n: usize) -> i32 {
    i32::try_from(n).expect("kernel sizes fit i32")
}

impl CudaDevice {
    /// Opens device `ordinal`, compiles the kernels for its compute
    /// capability (CUBIN for `sm_XY`, through the disk cache) and loads them.
    pub fn open(ordinal: usize) -> Result<Arc<Self>, CudaError> {
        probe(ordinal)?;
        let ctx = CudaContext::new(ordinal).map_err(|e| CudaError::NoDevice { ordinal, msg: format!("{e:?}") })?;
        // SAFETY: event tracking only orders work across streams; this
        // backend uses one stream, so stream order alone is enough.
        unsafe { ctx.disable_event_tracking() };
        let info = info_of(&ctx, ordinal)?;
        let target = nvrtc::target_name(info.compute_capability, Output::Cubin);
        let dir = nvrtc::cache_dir();
        let image = nvrtc::cached_compile(dir.as_deref(), &target, Output::Cubin)?;
        let module = ctx
            .load_module(cudarc::nvrtc::Ptx::from_binary(image.bytes.clone()))
            .map_err(|e| CudaError::Driver(format!("loading the kernels compiled for {target}: {e:?}")))?;
        let mut funcs = HashMap::new();
        for name in kernel_names() {
            let f = module.load_function(&name).map_err(|e| CudaError::Driver(format!("kernel {name}: {e:?}")))?;
            funcs.insert(name, f);
        }
        let stream = ctx.default_stream();
        Ok(Arc::new(CudaDevice { info, ctx, stream, image, _module: module, funcs }))
    }

    fn func(&self, name: &str) -> &CudaFunction {
        self.funcs.get(name).unwrap_or_else(|| panic!("kernel {name} was not loaded"))
    }

    /// Waits for every launch so far.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        self.stream.synchronize().map_err(drv)
    }

    /// A zeroed device buffer of `n` elements.
    pub fn alloc<T: DeviceRepr + ValidAsZeroBits>(&self, n: usize) -> Result<CudaSlice<T>, CudaError> {
        self.stream.alloc_zeros::<T>(n.max(1)).map_err(drv)
    }

    /// Copies `v` to a new device buffer.
    pub fn upload<T: DeviceRepr>(&self, v: &[T]) -> Result<CudaSlice<T>, CudaError> {
        self.stream.clone_htod(v).map_err(drv)
    }

    /// Copies `v` into the front of `dst`.
    pub fn upload_into<T: DeviceRepr>(&self, v: &[T], dst: &mut CudaViewMut<T>) -> Result<(), CudaError> {
        self.stream.memcpy_htod(v, dst).map_err(drv)
    }

    /// Copies a device buffer to the host (waits for the stream).
    pub fn download<T: DeviceRepr, S: DevicePtr<T>>(&self, src: &S) -> Result<Vec<T>, CudaError> {
        self.stream.clone_dtoh(src).map_err(drv)
    }

    /// Device-to-device copy of `src` into the front of `dst`.
    pub fn copy<T: DeviceRepr>(&self, src: &CudaView<T>, dst: &mut CudaViewMut<T>) -> Result<(), CudaError> {
        self.stream.memcpy_dtod(src, dst).map_err(drv)
    }

    /// Uploads a weight matrix once: block bytes as stored in GGUF, or f32.
    /// The CPU's row-interleaved layout is refused: the device kernels read
    /// GGUF blocks.
    pub fn upload_matrix(&self, m: &Matrix) -> Result<DevMatrix, CudaError> {
        let data = match m.w {
            Weights::R16(_) => {
                return Err(CudaError::Unsupported("row-interleaved (CPU) layout; upload the GGUF view"));
            }
            Weights::Q4_0(w) => DevData::Blocks(self.upload(block_bytes(w))?),
            Weights::Q4_1(w) => DevData::Blocks(self.upload(block_bytes(w))?),
            Weights::Q5_0(w) => DevData::Blocks(self.upload(block_bytes(w))?),
            Weights::Q5_1(w) => DevData::Blocks(self.upload(block_bytes(w))?),
            Weights::Q8_0(w) => DevData::Blocks(self.upload(block_bytes(w))?),
            Weights::Q4K(w) => DevData::Blocks(self.upload(block_bytes(w))?),
            Weights::Q6K(w) => DevData::Blocks(self.upload(block_bytes(w))?),
            Weights::F32(w) => DevData::F32(self.upload(w)?),
            Weights::Q5K(_) => return Err(CudaError::Unsupported("Q5_K")),
            Weights::Q2K(_) | Weights::Q3K(_) | Weights::F16(_) | Weights::BF16(_) => {
                return Err(CudaError::Unsupported(weights_type(&m.w).name()));
            }
        };
        Ok(DevMatrix { ty: weights_type(&m.w), rows: m.rows, cols: m.cols, data })
    }

    /// Quantizes `rows` rows of `cols` f32 (`x`) into `q`, `d`, `s` (the
    /// layout of [`QuantView`]): bit for bit [`crate::act::ActRow::quantize`].
    pub fn quantize(
        &self,
        x: &CudaView<f32>,
        rows: usize,
        cols: usize,
        q: &mut CudaViewMut<i16>,
        d: &mut CudaViewMut<f32>,
        s: &mut CudaViewMut<f32>,
    ) -> Result<(), CudaError> {
        assert!(cols.is_multiple_of(QK), "activation length must be a multiple of 32");
        let nb = rows * cols / QK;
        assert!(x.len() >= rows * cols && q.len() >= rows * cols && d.len() >= nb && s.len() >= nb);
        let n = int(nb);
        let cfg =
            LaunchConfig { grid_dim: (grid(nb, MV_WARPS), 1, 1), block_dim: (MV_THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.stream.launch_builder(self.func("quantize_act"));
        b.arg(x).arg(q).arg(d).arg(s).arg(&n);
        // SAFETY: the kernel reads rows*cols floats of x and writes as many
        // quants and nb scales and sums (lengths asserted above); the
        // argument types match quantize_act's signature.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }

    /// Quantizes `rows` rows of `cols` f32 (`x`, `cols` a multiple of 256)
    /// to 8 bits into `qs`, `d`, `bsum16`, `bsum32` (the layout of
    /// [`Quant8View`]): bit for bit [`crate::act8::ActRow8::quantize`] of
    /// each row.
    #[allow(clippy::too_many_arguments)]
    pub fn quantize8(
        &self,
        x: &CudaView<f32>,
        rows: usize,
        cols: usize,
        qs: &mut CudaViewMut<i8>,
        d: &mut CudaViewMut<f32>,
        bsum16: &mut CudaViewMut<i16>,
        bsum32: &mut CudaViewMut<i16>,
    ) -> Result<(), CudaError> {
        assert!(cols.is_multiple_of(QK_K), "8-bit activation length must be a multiple of 256");
        let nsb = rows * cols / QK_K;
        assert!(x.len() >= rows * cols && qs.len() >= rows * cols && d.len() >= nsb);
        assert!(bsum16.len() >= 16 * nsb && bsum32.len() >= 8 * nsb);
        // The kernel stores the quants a word at a time.
        assert!(qs.device_ptr_mut(&self.stream).0.is_multiple_of(4), "8-bit quants must be 4-byte aligned");
        let n = int(nsb);
        let cfg =
            LaunchConfig { grid_dim: (grid(nsb, MV_WARPS), 1, 1), block_dim: (MV_THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.stream.launch_builder(self.func("quantize_act8"));
        b.arg(x).arg(qs).arg(d).arg(bsum16).arg(bsum32).arg(&n);
        // SAFETY: the kernel reads rows*cols floats of x and writes as many
        // quants (4-byte aligned, asserted), nsb scales, 16 nsb and 8 nsb
        // sums (lengths asserted above); the argument types match
        // quantize_act8's signature.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }

    /// `out[j * m.rows + r] = m[r] · x_j` for the `n` 8-bit activation rows
    /// `xq` (quantized by [`Self::quantize8`]), `m` a K-quant matrix
    /// ([`DevMatrix::takes_int8`]): bit for bit
    /// [`crate::matvec::scalar8`] on the same rows. In passes of at most
    /// `max_rows_per_pass` rows, as [`Self::matmul_with`].
    ///
    /// # Panics
    /// If `m` does not take 8-bit activations, or on shape mismatches.
    pub fn matmul8_with(
        &self,
        m: &DevMatrix,
        n: usize,
        xq: &Quant8View,
        out: &mut CudaViewMut<f32>,
        max_rows_per_pass: usize,
    ) -> Result<(), CudaError> {
        let (rows, cols) = (m.rows, m.cols);
        assert!(m.takes_int8(), "{} matrices do not take 8-bit activations", m.ty.name());
        assert!(cols.is_multiple_of(QK_K), "K-quant rows are whole super-blocks");
        let nsb = cols / QK_K;
        assert!(out.len() >= n * rows, "output too short");
        assert!(xq.qs.len() >= n * cols && xq.d.len() >= n * nsb);
        assert!(xq.bsum16.len() >= 16 * n * nsb && xq.bsum32.len() >= 8 * n * nsb);
        // The kernels read the quants a word at a time (each pass starts a
        // multiple of 256 quants further on).
        assert!(xq.qs.device_ptr(&self.stream).0.is_multiple_of(4), "8-bit quants must be 4-byte aligned");
        let DevData::Blocks(w) = &m.data else { unreachable!("K-quant matrices are uploaded as blocks") };
        let fmt = format_name(m.ty)?;
        let cfg =
            LaunchConfig { grid_dim: (grid(rows, MV_WARPS), 1, 1), block_dim: (MV_THREADS, 1, 1), shared_mem_bytes: 0 };
        let (ri, ci) = (int(rows), int(cols));
        let max = max_rows_per_pass.clamp(1, CUDA_ROWS_PER_PASS);
        for (j0, nr) in (0..n).step_by(max).map(|j0| (j0, max.min(n - j0))) {
            let mut o = out.slice_mut(j0 * rows..(j0 + nr) * rows);
            let qs = xq.qs.slice(j0 * cols..);
            let d = xq.d.slice(j0 * nsb..);
            let b16 = xq.bsum16.slice(16 * j0 * nsb..);
            let b32 = xq.bsum32.slice(8 * j0 * nsb..);
            let mut b = self.stream.launch_builder(self.func(&matvec8_kernel_name(fmt, nr)));
            b.arg(w).arg(&qs).arg(&d).arg(&b16).arg(&b32).arg(&mut o).arg(&ri).arg(&ci);
            // SAFETY: w holds rows * row_bytes(cols) bytes (uploaded from a
            // validated Matrix, its buffer 256-byte aligned as the kernel's
            // word loads of Q4_K quants need); qs, d, bsum16, bsum32 hold nr
            // rows from j0 (asserted), qs 4-byte aligned; o holds nr * rows
            // floats; the argument list matches matvec_<fmt>_q8_k_r<nr>.
            unsafe { b.launch(cfg) }.map_err(drv)?;
        }
        Ok(())
    }

    /// [`Self::matmul8_with`] at the dispatch table's width.
    pub fn matmul8(
        &self,
        m: &DevMatrix,
        n: usize,
        xq: &Quant8View,
        out: &mut CudaViewMut<f32>,
    ) -> Result<(), CudaError> {
        self.matmul8_with(m, n, xq, out, CUDA_ROWS_PER_PASS)
    }

    /// `out[j * m.rows + r] = m[r] · x_j` for the `n` activation rows,
    /// in passes of at most `max_rows_per_pass` rows (normally
    /// [`CUDA_ROWS_PER_PASS`]; tests pass 1 to get the single-row kernel).
    /// Quantized matrices read `xq`, f32 ones `x`.
    pub fn matmul_with(
        &self,
        m: &DevMatrix,
        n: usize,
        x: &CudaView<f32>,
        xq: Option<&QuantView>,
        out: &mut CudaViewMut<f32>,
        max_rows_per_pass: usize,
    ) -> Result<(), CudaError> {
        let (rows, cols) = (m.rows, m.cols);
        let nb = cols / QK;
        assert!(out.len() >= n * rows, "output too short");
        let fmt = format_name(m.ty)?;
        let cfg =
            LaunchConfig { grid_dim: (grid(rows, MV_WARPS), 1, 1), block_dim: (MV_THREADS, 1, 1), shared_mem_bytes: 0 };
        let (ri, ci) = (int(rows), int(cols));
        let max = max_rows_per_pass.clamp(1, CUDA_ROWS_PER_PASS);
        for (j0, nr) in (0..n).step_by(max).map(|j0| (j0, max.min(n - j0))) {
            let f = self.func(&matvec_kernel_name(fmt, nr));
            let mut o = out.slice_mut(j0 * rows..(j0 + nr) * rows);
            let mut b = self.stream.launch_builder(f);
            match &m.data {
                DevData::Blocks(w) => {
                    let xq = xq.expect("quantized matrix needs the quantized activation");
                    assert!(xq.q.len() >= n * cols && xq.d.len() >= n * nb && xq.s.len() >= n * nb);
                    let q = xq.q.slice(j0 * cols..);
                    let d = xq.d.slice(j0 * nb..);
                    let s = xq.s.slice(j0 * nb..);
                    b.arg(w).arg(&q).arg(&d).arg(&s).arg(&mut o).arg(&ri).arg(&ci);
                    // SAFETY: w holds rows * row_bytes(cols) bytes (uploaded
                    // from a validated Matrix); q, d, s hold nr rows from j0
                    // (asserted); o holds nr * rows floats; the argument
                    // list matches matvec_<fmt>_r<nr>.
                    unsafe { b.launch(cfg) }.map_err(drv)?;
                }
                DevData::F32(w) => {
                    assert!(x.len() >= n * cols);
                    let xs = x.slice(j0 * cols..);
                    b.arg(w).arg(&xs).arg(&mut o).arg(&ri).arg(&ci);
                    // SAFETY: w holds rows * cols floats; xs nr rows of
                    // cols; o nr * rows; the list matches matvec_f32_r<nr>.
                    unsafe { b.launch(cfg) }.map_err(drv)?;
                }
            }
        }
        Ok(())
    }

    /// [`Self::matmul_with`] at the dispatch table's width.
    pub fn matmul(
        &self,
        m: &DevMatrix,
        n: usize,
        x: &CudaView<f32>,
        xq: Option<&QuantView>,
        out: &mut CudaViewMut<f32>,
    ) -> Result<(), CudaError> {
        debug_assert!(passes(n).all(|(_, nr)| nr <= CUDA_ROWS_PER_PASS));
        self.matmul_with(m, n, x, xq, out, CUDA_ROWS_PER_PASS)
    }

    /// RMSNorm of `rows` rows of `n` (as [`crate::ops::rmsnorm`]).
    pub fn rmsnorm(
        &self,
        x: &CudaView<f32>,
        w: &CudaView<f32>,
        out: &mut CudaViewMut<f32>,
        rows: usize,
        n: usize,
        eps: f32,
    ) -> Result<(), CudaError> {
        assert!(x.len() >= rows * n && out.len() >= rows * n && w.len() >= n);
        let ni = int(n);
        let cfg =
            LaunchConfig { grid_dim: (int(rows) as u32, 1, 1), block_dim: (NORM_THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.stream.launch_builder(self.func("rmsnorm"));
        b.arg(x).arg(w).arg(out).arg(&ni).arg(&eps);
        // SAFETY: lengths asserted; the list matches rmsnorm's signature.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }

    /// RoPE in place on `rows` rows of `n_heads * head_dim`, with per-row
    /// angles `cos`/`sin` ((rows, head_dim / 2)).
    #[allow(clippy::too_many_arguments)]
    pub fn rope(
        &self,
        x: &mut CudaViewMut<f32>,
        cos: &CudaView<f32>,
        sin: &CudaView<f32>,
        rows: usize,
        n_heads: usize,
        head_dim: usize,
        adjacent: bool,
    ) -> Result<(), CudaError> {
        let half = head_dim / 2;
        assert!(x.len() >= rows * n_heads * head_dim && cos.len() >= rows * half && sin.len() >= rows * half);
        let pairs = n_heads * half;
        let (nh, hd, adj) = (int(n_heads), int(head_dim), i32::from(adjacent));
        let cfg = LaunchConfig {
            grid_dim: (grid(pairs, ELEMWISE_THREADS), int(rows) as u32, 1),
            block_dim: (ELEMWISE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(self.func("rope"));
        b.arg(x).arg(cos).arg(sin).arg(&nh).arg(&hd).arg(&adj);
        // SAFETY: lengths asserted; the list matches rope's signature.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }

    /// SwiGLU in place over `n` elements: `gate = silu(gate) * up`.
    pub fn swiglu(&self, gate: &mut CudaViewMut<f32>, up: &CudaView<f32>, n: usize) -> Result<(), CudaError> {
        assert!(gate.len() >= n && up.len() >= n);
        let ni = int(n);
        let cfg = LaunchConfig {
            grid_dim: (grid(n, ELEMWISE_THREADS), 1, 1),
            block_dim: (ELEMWISE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(self.func("swiglu"));
        b.arg(gate).arg(up).arg(&ni);
        // SAFETY: lengths asserted; the list matches swiglu's signature.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }

    /// `x += y` over `n` elements.
    pub fn add(&self, x: &mut CudaViewMut<f32>, y: &CudaView<f32>, n: usize) -> Result<(), CudaError> {
        assert!(x.len() >= n && y.len() >= n);
        let ni = int(n);
        let cfg = LaunchConfig {
            grid_dim: (grid(n, ELEMWISE_THREADS), 1, 1),
            block_dim: (ELEMWISE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(self.func("add_inplace"));
        b.arg(x).arg(y).arg(&ni);
        // SAFETY: lengths asserted; the list matches add_inplace's signature.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }

    /// Rows `tokens[i]` of the (vocab, cols) table `m`, dequantized, into
    /// `out` ((tokens.len(), cols)). Token ids must be below `m.rows`.
    pub fn embed(
        &self,
        m: &DevMatrix,
        tokens: &CudaView<i32>,
        n: usize,
        out: &mut CudaViewMut<f32>,
    ) -> Result<(), CudaError> {
        assert!(tokens.len() >= n && out.len() >= n * m.cols);
        let fmt = format_name(m.ty)?;
        let ci = int(m.cols);
        let cfg = LaunchConfig {
            grid_dim: (grid(m.cols, ELEMWISE_THREADS), int(n) as u32, 1),
            block_dim: (ELEMWISE_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(self.func(&format!("embed_{fmt}")));
        match &m.data {
            DevData::Blocks(w) => b.arg(w),
            DevData::F32(w) => b.arg(w),
        };
        b.arg(tokens).arg(out).arg(&ci);
        // SAFETY: token ids are checked against the vocabulary by the
        // caller (ForwardError::TokenOutOfRange), so every row read lies in
        // w; lengths asserted; the list matches embed_<fmt>.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }

    /// Causal attention of `rows` query rows at positions `start..start+rows`
    /// over the cache `k`/`v` ((positions, n_kv_heads * head_dim), holding at
    /// least `start + rows` positions). `scores`: scratch of
    /// `rows * n_heads * (start + rows)` floats.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        q: &CudaView<f32>,
        k: &CudaView<f32>,
        v: &CudaView<f32>,
        out: &mut CudaViewMut<f32>,
        scores: &mut CudaViewMut<f32>,
        rows: usize,
        start: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
    ) -> Result<(), CudaError> {
        let (qd, kvd, ctx) = (n_heads * head_dim, n_kv_heads * head_dim, start + rows);
        assert!(n_heads.is_multiple_of(n_kv_heads));
        assert!(q.len() >= rows * qd && out.len() >= rows * qd);
        assert!(k.len() >= ctx * kvd && v.len() >= ctx * kvd && scores.len() >= rows * n_heads * ctx);
        let (nh, nkv, hd, st, mc) = (int(n_heads), int(n_kv_heads), int(head_dim), int(start), int(ctx));
        let cfg = LaunchConfig {
            grid_dim: (int(n_heads) as u32, int(rows) as u32, 1),
            block_dim: (ATT_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.stream.launch_builder(self.func("attention"));
        b.arg(q).arg(k).arg(v).arg(out).arg(scores).arg(&nh).arg(&nkv).arg(&hd).arg(&st).arg(&mc);
        // SAFETY: lengths asserted (every row reads at most start + rows
        // cached positions and writes its own scores row); the list matches
        // attention's signature.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }

    /// Argmax of each of `rows` rows of `n` (the CPU sampler's tie rule).
    pub fn argmax(
        &self,
        x: &CudaView<f32>,
        rows: usize,
        n: usize,
        out: &mut CudaViewMut<i32>,
    ) -> Result<(), CudaError> {
        assert!(x.len() >= rows * n && out.len() >= rows);
        let ni = int(n);
        let cfg =
            LaunchConfig { grid_dim: (int(rows) as u32, 1, 1), block_dim: (ARGMAX_THREADS, 1, 1), shared_mem_bytes: 0 };
        let mut b = self.stream.launch_builder(self.func("argmax"));
        b.arg(x).arg(&ni).arg(out);
        // SAFETY: lengths asserted; the list matches argmax's signature.
        unsafe { b.launch(cfg) }.map(|_| ()).map_err(drv)
    }
}
