/*
 * What the fake CUDA runtime (tests/fakes/fake_cuda.c) lacks to stand in for
 * libcudart.so.13 under tests/gpu/cuda_all.cu: the calls it makes besides the
 * wrapped ones, and nvcc's module registration (so an nvcc-built cuda_all runs
 * on it too). Linked into the same libcudart.so.13 as fake_cuda.c, with the
 * real library's symbol version (fake_cudart13.map).
 */
#include <stddef.h>

typedef int cudaError_t;

cudaError_t cudaStreamDestroy(void *s) { (void) s; return 0; }
cudaError_t cudaDeviceGetDefaultMemPool(void **pool, int device)
{
	*pool = (void *) (0x9000ul + (unsigned long) device);
	return 0;
}
void **__cudaRegisterFatBinary(void *fatbin) { (void) fatbin; static void *handle; return &handle; }
void __cudaRegisterFatBinaryEnd(void **handle) { (void) handle; }
void __cudaUnregisterFatBinary(void **handle) { (void) handle; }
char __cudaInitModule(void **handle) { (void) handle; return 0; }
