/* cuBLAS loaded on first use, for the StarPU and the libtiletrain that scripts/build-starpu.sh
 * builds against the CUDA wheels (it compiles this file into the CUDA root as
 * libtt_cublas_lazy.so.13, and that root's link-time libcublas.so names it).
 *
 * Why: libcublas.so.13 and the libcublasLt.so.13 it needs take about 210 MB of resident
 * memory to load (their relocations touch that many data pages; 0.1 s with the files in the
 * page cache, 0.8 s without), in every process that links them, with a GPU or without one:
 * every `import tiletrain`, every MPI rank of every test.  StarPU (src/drivers/cuda/starpu_cublas.c) and tiletrain (csrc/devices.c,
 * csrc/kernels/cuda/gemm.cu) call cuBLAS only once a CUDA worker has started.  This library
 * exports the cuBLAS functions they call; the first call loads the real libcublas.so.13 from
 * this library's own directory and forwards every call to it, so a process without a CUDA
 * worker never loads cuBLAS.  (libcublas is linked -Bsymbolic: its calls to its own functions
 * never come back here.)
 *
 * A cuBLAS function that tiletrain starts calling must be added below: libtiletrain links with
 * -Wl,--no-undefined, which names the missing one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CUBLASAPI /* (as cublas_v2.h does) */
#include <cublas_api.h> /* the types, and the prototypes of the v2 functions */

/* the legacy API (cublas.h, which cannot be included beside cublas_api.h's v2 names) */
cublasStatus_t cublasInit(void);
cublasStatus_t cublasShutdown(void);
cublasStatus_t cublasSetKernelStream(cudaStream_t stream);

static void *real;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void)
{
    Dl_info self;
    char path[4096] = "libcublas.so.13";
    if (dladdr((void *)load, &self) && self.dli_fname && strrchr(self.dli_fname, '/')) {
        size_t dir = (size_t)(strrchr(self.dli_fname, '/') - self.dli_fname) + 1;
        if (dir + sizeof "libcublas.so.13" <= sizeof path)
            snprintf(path, sizeof path, "%.*slibcublas.so.13", (int)dir, self.dli_fname);
    }
    real = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!real) {
        fprintf(stderr, "tiletrain: cannot load cuBLAS (%s): %s\n", path, dlerror());
        abort();
    }
}

static void *resolve(const char *name)
{
    pthread_once(&once, load);
    void *f = dlsym(real, name);
    if (!f) {
        fprintf(stderr, "tiletrain: cuBLAS has no %s: %s\n", name, dlerror());
        abort();
    }
    return f;
}

#define FORWARD(name, params, args)                                          \
    cublasStatus_t name params                                               \
    {                                                                        \
        static cublasStatus_t(*f) params;                                    \
        cublasStatus_t(*g) params = __atomic_load_n(&f, __ATOMIC_ACQUIRE);   \
        if (!g) {                                                            \
            g = (cublasStatus_t(*) params)resolve(#name);                    \
            __atomic_store_n(&f, g, __ATOMIC_RELEASE);                       \
        }                                                                    \
        return g args;                                                       \
    }

/* StarPU 1.3's starpu_cublas.c */
FORWARD(cublasInit, (void), ())
FORWARD(cublasShutdown, (void), ())
FORWARD(cublasSetKernelStream, (cudaStream_t s), (s))
FORWARD(cublasCreate_v2, (cublasHandle_t *h), (h))
FORWARD(cublasDestroy_v2, (cublasHandle_t h), (h))
FORWARD(cublasSetStream_v2, (cublasHandle_t h, cudaStream_t s), (h, s))

/* tiletrain's csrc/kernels/cuda/gemm.cu */
FORWARD(cublasSgemmStridedBatched,
        (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,
         const float *A, int lda, long long sa, const float *B, int ldb, long long sb, const float *beta, float *C,
         int ldc, long long sc, int count),
        (h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, count))
FORWARD(cublasDgemmStridedBatched,
        (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double *alpha,
         const double *A, int lda, long long sa, const double *B, int ldb, long long sb, const double *beta,
         double *C, int ldc, long long sc, int count),
        (h, ta, tb, m, n, k, alpha, A, lda, sa, B, ldb, sb, beta, C, ldc, sc, count))
FORWARD(cublasGemmStridedBatchedEx,
        (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
         const void *A, cudaDataType at, int lda, long long sa, const void *B, cudaDataType bt, int ldb,
         long long sb, const void *beta, void *C, cudaDataType ct, int ldc, long long sc, int count,
         cublasComputeType_t compute, cublasGemmAlgo_t algo),
        (h, ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, count, compute, algo))
