/*
 * The part of CUDA 13's cuda_runtime.h that tests/gpu/cuda_all.cu uses, so it
 * builds as plain C++ where no CUDA toolkit is installed (CI) and runs against
 * the fake runtime (tests/gpu/fake_cudart13.c). Values and signatures as in
 * CUDA 13.0's headers; never used for the real build (nvcc, gpu-check.sh).
 */
#ifndef MEMQ_SHIM_CUDA_RUNTIME_H
#define MEMQ_SHIM_CUDA_RUNTIME_H
#include <stddef.h>

extern "C" {
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaErrorInvalidMemcpyDirection = 21 };
typedef struct CUstream_st *cudaStream_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost,
		      cudaMemcpyDeviceToDevice, cudaMemcpyDefault };
enum cudaMemLocationType { cudaMemLocationTypeInvalid, cudaMemLocationTypeDevice, cudaMemLocationTypeHost };
struct cudaMemLocation { enum cudaMemLocationType type; int id; };
enum cudaMemoryAdvise { cudaMemAdviseSetReadMostly = 1, cudaMemAdviseSetPreferredLocation = 3 };
#define cudaStreamPerThread ((cudaStream_t) 0x2)
#define cudaMemAttachGlobal 0x01
#define cudaHostAllocPortable 0x01
#define cudaHostRegisterDefault 0x00

cudaError_t cudaSetDevice(int);
cudaError_t cudaStreamCreate(cudaStream_t *);
cudaError_t cudaStreamDestroy(cudaStream_t);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *, int);
cudaError_t cudaMalloc(void **, size_t);
cudaError_t cudaMallocManaged(void **, size_t, unsigned int);
cudaError_t cudaMallocHost(void **, size_t);
cudaError_t cudaHostAlloc(void **, size_t, unsigned int);
cudaError_t cudaMallocAsync(void **, size_t, cudaStream_t);
cudaError_t cudaMallocFromPoolAsync(void **, size_t, cudaMemPool_t, cudaStream_t);
cudaError_t cudaMallocPitch(void **, size_t *, size_t, size_t);
cudaError_t cudaFree(void *);
cudaError_t cudaFreeAsync(void *, cudaStream_t);
cudaError_t cudaFreeHost(void *);
cudaError_t cudaHostRegister(void *, size_t, unsigned int);
cudaError_t cudaHostUnregister(void *);
cudaError_t cudaMemcpy(void *, const void *, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void *, const void *, size_t, enum cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy2D(void *, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind);
cudaError_t cudaMemcpy2DAsync(void *, size_t, const void *, size_t, size_t, size_t, enum cudaMemcpyKind,
			      cudaStream_t);
cudaError_t cudaMemcpyPeer(void *, int, const void *, int, size_t);
cudaError_t cudaMemcpyPeerAsync(void *, int, const void *, int, size_t, cudaStream_t);
cudaError_t cudaMemset(void *, int, size_t);
cudaError_t cudaMemsetAsync(void *, int, size_t, cudaStream_t);
cudaError_t cudaMemPrefetchAsync(const void *, size_t, struct cudaMemLocation, unsigned int, cudaStream_t);
cudaError_t cudaMemAdvise(const void *, size_t, enum cudaMemoryAdvise, struct cudaMemLocation);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaDeviceSynchronize(void);
}
#endif
