/* cublas_v2.h (stand-in) - only the status type and its two names, which
 * runtime/cuda_check.h's CUBLAS_CHECK spells; comm_nccl.cu calls no cuBLAS
 * function, and no stand-in file does either. */
#ifndef DDPC_STANDIN_CUBLAS_V2_H
#define DDPC_STANDIN_CUBLAS_V2_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1 } cublasStatus_t;
const char *cublasGetStatusName(cublasStatus_t s);
const char *cublasGetStatusString(cublasStatus_t s);

#ifdef __cplusplus
}
#endif
#endif
