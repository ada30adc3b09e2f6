# shellcheck shell=bash disable=SC2034 # sets variables for the script that sources it
# Sourced (not run) by the scripts that build llama.cpp from source
# (llamacpp-venv.sh, llama-server.sh): sets GGML_CPU_CMAKE_FEATURES to the
# cmake options that switch on every ggml x86 feature this CPU's flags list
# (AVX, AVX2, FMA, F16C, BMI2, SSE4.2, AVX-512 F/VBMI/VNNI/BF16, AVX-VNNI),
# and GGML_CPU_ID_TEXT to the text a build's cache key hashes (the CPU model
# and flags).
#
# AMX stays OFF, always: GGML_NATIVE=ON enables AMX wherever CPUID lists it,
# and in virtual machines that list AMX without running it (this project's
# Sapphire Rapids hosts) llama.cpp then dies with "Illegal instruction" at
# its first `tilezero`. So GGML_NATIVE is OFF and each feature is named.

ggml_cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
GGML_CPU_CMAKE_FEATURES="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
for ggml_pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 sse4_2:SSE42 avx512f:AVX512 \
    avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 avx_vnni:AVX_VNNI; do
    case "$ggml_cpu_flags" in
    *" ${ggml_pair%%:*} "*) GGML_CPU_CMAKE_FEATURES="$GGML_CPU_CMAKE_FEATURES -DGGML_${ggml_pair#*:}=ON" ;;
    *) GGML_CPU_CMAKE_FEATURES="$GGML_CPU_CMAKE_FEATURES -DGGML_${ggml_pair#*:}=OFF" ;;
    esac
done
GGML_CPU_ID_TEXT=$(
    grep -m1 '^model name' /proc/cpuinfo || true
    grep -m1 '^flags' /proc/cpuinfo || true
)
unset ggml_cpu_flags ggml_pair
