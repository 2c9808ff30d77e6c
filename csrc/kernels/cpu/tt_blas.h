/* The CPU BLAS, chosen at build time (CMake TT_BLAS): OpenBLAS (Debian libopenblas, the
 * default) or Intel MKL (the mkl-devel wheel, sequential layer).  Kernels include this header
 * instead of <cblas.h>; both provide the standard CBLAS interface. */
#ifndef TT_BLAS_H
#define TT_BLAS_H

#ifdef TT_BLAS_MKL
#include <mkl_cblas.h>
#include <mkl_service.h>
#define TT_BLAS_NAME "mkl"
/* The sequential layer is single-threaded already; this also covers a mkl_rt link. */
#define tt_blas_single_thread() mkl_set_num_threads(1)
#else
#include <cblas.h>
#define TT_BLAS_NAME "openblas"
/* Each StarPU worker runs one BLAS call on its own core: the workers are the parallelism. */
#define tt_blas_single_thread() openblas_set_num_threads(1)
#endif

#endif
