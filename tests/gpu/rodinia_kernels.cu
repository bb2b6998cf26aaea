/*
 * The kernels of tests/fakes/rodinia_work.c on a real GPU (scripts/gpu-check.sh:
 * nvcc -cudart shared tests/fakes/rodinia_work.c tests/gpu/rodinia_kernels.cu):
 * rodinia_kernels.h's per-element bodies, one per thread, as the fake
 * (tests/fakes/rodinia_kernels_fake.c) runs them in a loop. Each launches on the
 * default stream, so it runs in order with the program's cudaMemcpy calls, as
 * Rodinia's do. A launch error ends the program (exit 1): the copies' account
 * would mean nothing.
 */
#include <stdio.h>
#include <stdlib.h>

#include "rodinia_kernels.h"

#define THREADS 256
#define GRID(n) (((n) + THREADS - 1) / THREADS), THREADS
#define TID() (blockIdx.x * blockDim.x + threadIdx.x)

static void launched(const char *name)
{
	cudaError_t e = cudaGetLastError();

	if (e != cudaSuccess) {
		fprintf(stderr, "rodinia_work: kernel %s: %s\n", name, cudaGetErrorString(e));
		exit(1);
	}
}

/* backprop: one 16x16 block per 16 inputs, the column reduction in shared memory (as Rodinia's). */
__global__ void bp_forward(const float *input, float *input_hidden, float *partial, int hid)
{
	int by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y, index = bp_index(hid, by, ty, tx);
	__shared__ float node[RK_SIDE];
	__shared__ float w[RK_SIDE][RK_SIDE];

	if (tx == 0)
		node[ty] = input[RK_SIDE * by + ty + 1];
	__syncthreads();
	w[ty][tx] = input_hidden[index] * node[ty];
	__syncthreads();
	for (int two = 2; two <= RK_SIDE; two *= 2) {
		if (ty % two == 0)
			w[ty][tx] += w[ty + two / 2][tx];
		__syncthreads();
	}
	input_hidden[index] = w[ty][tx];
	__syncthreads();
	if (tx == 0)
		partial[by * hid + ty] = w[tx][ty];
}

__global__ void bp_adjust(const float *delta, int hid, const float *ly, float *w, float *oldw)
{
	bp_adjust_one(delta, hid, ly, w, oldw, blockIdx.y, threadIdx.y, threadIdx.x);
}

__global__ void bp_bias(const float *delta, float *w, float *oldw) { bp_adjust_bias(delta, w, oldw, threadIdx.x); }

extern "C" void k_bp_forward(const float *input, float *input_hidden, float *partial, int in, int hid)
{
	bp_forward<<<dim3(1, in / RK_SIDE), dim3(RK_SIDE, RK_SIDE)>>>(input, input_hidden, partial, hid);
	launched("bp_forward");
}

/* The bias row after every other element, as the fake does (a kernel boundary orders them). */
extern "C" void k_bp_adjust(const float *delta, int hid, const float *ly, int in, float *w, float *oldw)
{
	bp_adjust<<<dim3(1, in / RK_SIDE), dim3(RK_SIDE, RK_SIDE)>>>(delta, hid, ly, w, oldw);
	launched("bp_adjust");
	bp_bias<<<1, RK_SIDE>>>(delta, w, oldw);
	launched("bp_bias");
}

__global__ void sc_cost(int num, int dim, long x, const sc_point *p, int K, int stride, const float *coord,
	float *work_mem, const int *center_table, char *switch_membership)
{
	int i = TID();

	if (i < num)
		sc_cost_one(i, num, dim, x, p, K, stride, coord, work_mem, center_table, switch_membership);
}

extern "C" void k_sc_cost(int num, int dim, long x, const sc_point *p, int K, int stride, const float *coord,
	float *work_mem, const int *center_table, char *switch_membership)
{
	sc_cost<<<GRID(num)>>>(num, dim, x, p, K, stride, coord, work_mem, center_table, switch_membership);
	launched("sc_cost");
}

__global__ void cfd_init(int nelr, float *vars)
{
	int i = TID();

	if (i < nelr)
		cfd_init_one(i, nelr, vars);
}

__global__ void cfd_step_factor(int nelr, const float *vars, const float *areas, float *step)
{
	int i = TID();

	if (i < nelr)
		cfd_step_factor_one(i, nelr, vars, areas, step);
}

__global__ void cfd_flux(int nelr, const int *ese, const float *normals, const float *vars, float *fluxes)
{
	int i = TID();

	if (i < nelr)
		cfd_flux_one(i, nelr, ese, normals, vars, fluxes);
}

__global__ void cfd_time_step(int j, int nelr, const float *old, float *vars, const float *step, const float *fluxes)
{
	int i = TID();

	if (i < nelr)
		cfd_time_step_one(i, j, nelr, old, vars, step, fluxes);
}

extern "C" void k_cfd_init(int nelr, float *vars)
{
	cfd_init<<<GRID(nelr)>>>(nelr, vars);
	launched("cfd_init");
}

extern "C" void k_cfd_step_factor(int nelr, const float *vars, const float *areas, float *step)
{
	cfd_step_factor<<<GRID(nelr)>>>(nelr, vars, areas, step);
	launched("cfd_step_factor");
}

extern "C" void k_cfd_flux(int nelr, const int *ese, const float *normals, const float *vars, float *fluxes)
{
	cfd_flux<<<GRID(nelr)>>>(nelr, ese, normals, vars, fluxes);
	launched("cfd_flux");
}

extern "C" void k_cfd_time_step(int j, int nelr, const float *old, float *vars, const float *step, const float *fluxes)
{
	cfd_time_step<<<GRID(nelr)>>>(j, nelr, old, vars, step, fluxes);
	launched("cfd_time_step");
}

__global__ void bfs1(const bfs_node *nodes, const int *edges, char *mask, char *updating, const char *visited,
	int *cost, int n)
{
	int tid = TID();

	if (tid < n)
		bfs1_one(tid, nodes, edges, mask, updating, visited, cost);
}

__global__ void bfs2(char *mask, char *updating, char *visited, char *over, int n)
{
	int tid = TID();

	if (tid < n)
		bfs2_one(tid, mask, updating, visited, over);
}

extern "C" void k_bfs(const bfs_node *nodes, const int *edges, char *mask, char *updating, const char *visited,
	int *cost, int n)
{
	bfs1<<<GRID(n)>>>(nodes, edges, mask, updating, visited, cost, n);
	launched("bfs1");
}

extern "C" void k_bfs2(char *mask, char *updating, char *visited, char *over, int n)
{
	bfs2<<<GRID(n)>>>(mask, updating, visited, over, n);
	launched("bfs2");
}
