/*
 * The kernels of tests/fakes/rodinia_work.c on a real GPU (scripts/gpu-check.sh:
 * nvcc -cudart shared tests/fakes/rodinia_work.c tests/gpu/rodinia_kernels.cu).
 * Same reads and writes as tests/fakes/rodinia_kernels_fake.c; each launches on the
 * default stream, so it runs in order with the program's cudaMemcpy calls, as
 * Rodinia's do. A launch error ends the program (exit 1), as a wrong result would
 * make the copies' account meaningless.
 */
#include <stdio.h>
#include <stdlib.h>

#include "rodinia_kernels.h"

#define ETA 0.3f
#define MOMENTUM 0.3f
#define SIDE 16
#define NVAR 5
#define NNB 4
#define THREADS 256

static void launched(const char *name)
{
	cudaError_t e = cudaGetLastError();

	if (e != cudaSuccess) {
		fprintf(stderr, "rodinia_work: kernel %s: %s\n", name, cudaGetErrorString(e));
		exit(1);
	}
}

static int blocks(int n) { return (n + THREADS - 1) / THREADS; }

/* backprop: one 16x16 block per 16 inputs, the column reduction in shared memory (as Rodinia's). */
__global__ void bp_forward(const float *input, float *input_hidden, float *partial, int hid)
{
	int by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
	int index = (hid + 1) * SIDE * by + (hid + 1) * ty + tx + 1 + (hid + 1);
	__shared__ float node[SIDE];
	__shared__ float w[SIDE][SIDE];

	if (tx == 0)
		node[ty] = input[SIDE * by + ty + 1];
	__syncthreads();
	w[ty][tx] = input_hidden[index] * node[ty];
	__syncthreads();
	for (int two = 2; two <= SIDE; two *= 2) {
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
	int by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
	int index = (hid + 1) * SIDE * by + (hid + 1) * ty + tx + 1 + (hid + 1);
	float change = ETA * delta[tx + 1] * ly[SIDE * by + ty + 1] + MOMENTUM * oldw[index];

	w[index] += change;
	oldw[index] = change;
	__syncthreads();
	if (ty == 0 && by == 0) {
		change = ETA * delta[tx + 1] + MOMENTUM * oldw[tx + 1];
		w[tx + 1] += change;
		oldw[tx + 1] = change;
	}
}

extern "C" void k_bp_forward(const float *input, float *input_hidden, float *partial, int in, int hid)
{
	bp_forward<<<dim3(1, in / SIDE), dim3(SIDE, SIDE)>>>(input, input_hidden, partial, hid);
	launched("bp_forward");
}

extern "C" void k_bp_adjust(const float *delta, int hid, const float *ly, int in, float *w, float *oldw)
{
	bp_adjust<<<dim3(1, in / SIDE), dim3(SIDE, SIDE)>>>(delta, hid, ly, w, oldw);
	launched("bp_adjust");
}

__global__ void sc_cost(int num, int dim, long x, const sc_point *p, int K, int stride, const float *coord,
	float *work_mem, const int *center_table, char *switch_membership)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= num)
		return;
	float *lower = &work_mem[i * stride], d = 0;

	for (int l = 0; l < dim; l++) {
		float diff = coord[l * num + x] - coord[l * num + i];

		d += diff * diff;
	}
	d *= p[i].weight;
	if (d < p[i].cost) {
		switch_membership[i] = 1;
		lower[K] += d - p[i].cost;
	} else {
		lower[center_table[p[i].assign]] += p[i].cost - d;
	}
}

extern "C" void k_sc_cost(int num, int dim, long x, const sc_point *p, int K, int stride, const float *coord,
	float *work_mem, const int *center_table, char *switch_membership)
{
	sc_cost<<<blocks(num), THREADS>>>(num, dim, x, p, K, stride, coord, work_mem, center_table, switch_membership);
	launched("sc_cost");
}

__global__ void cfd_init(int nelr, float *vars)
{
	const float ff[NVAR] = { 1.4f, 1.68f, 0.0293f, 0.0f, 3.508f };
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < nelr)
		for (int j = 0; j < NVAR; j++)
			vars[i + j * nelr] = ff[j];
}

__global__ void cfd_step_factor(int nelr, const float *vars, const float *areas, float *step)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < nelr)
		step[i] = 0.5f / (sqrtf(areas[i]) * (fabsf(vars[i]) + fabsf(vars[i + nelr]) + 1.0f));
}

__global__ void cfd_flux(int nelr, const int *ese, const float *normals, const float *vars, float *fluxes)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i >= nelr)
		return;
	for (int j = 0; j < NVAR; j++) {
		float f = 0;

		for (int n = 0; n < NNB; n++) {
			int nb = ese[i + n * nelr];

			if (nb >= 0)
				f += normals[i + n * nelr] * (vars[nb + j * nelr] - vars[i + j * nelr]);
		}
		fluxes[i + j * nelr] = f;
	}
}

/* Reads other elements' variables (through the fluxes of the previous kernel only): in place is safe. */
__global__ void cfd_time_step(int j, int nelr, const float *old, float *vars, const float *step, const float *fluxes)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < nelr)
		for (int v = 0; v < NVAR; v++)
			vars[i + v * nelr] = old[i + v * nelr] + step[i] / (float) (3 + 1 - j) * fluxes[i + v * nelr] +
				1e-3f;
}

extern "C" void k_cfd_init(int nelr, float *vars)
{
	cfd_init<<<blocks(nelr), THREADS>>>(nelr, vars);
	launched("cfd_init");
}

extern "C" void k_cfd_step_factor(int nelr, const float *vars, const float *areas, float *step)
{
	cfd_step_factor<<<blocks(nelr), THREADS>>>(nelr, vars, areas, step);
	launched("cfd_step_factor");
}

extern "C" void k_cfd_flux(int nelr, const int *ese, const float *normals, const float *vars, float *fluxes)
{
	cfd_flux<<<blocks(nelr), THREADS>>>(nelr, ese, normals, vars, fluxes);
	launched("cfd_flux");
}

extern "C" void k_cfd_time_step(int j, int nelr, const float *old, float *vars, const float *step, const float *fluxes)
{
	cfd_time_step<<<blocks(nelr), THREADS>>>(j, nelr, old, vars, step, fluxes);
	launched("cfd_time_step");
}

__global__ void bfs1(const bfs_node *nodes, const int *edges, char *mask, char *updating, const char *visited,
	int *cost, int n)
{
	int tid = blockIdx.x * blockDim.x + threadIdx.x;

	if (tid >= n || !mask[tid])
		return;
	mask[tid] = 0;
	for (int i = nodes[tid].starting; i < nodes[tid].no_of_edges + nodes[tid].starting; i++) {
		int id = edges[i];

		if (!visited[id]) {
			cost[id] = cost[tid] + 1;
			updating[id] = 1;
		}
	}
}

__global__ void bfs2(char *mask, char *updating, char *visited, char *over, int n)
{
	int tid = blockIdx.x * blockDim.x + threadIdx.x;

	if (tid < n && updating[tid]) {
		mask[tid] = 1;
		visited[tid] = 1;
		*over = 1;
		updating[tid] = 0;
	}
}

extern "C" void k_bfs(const bfs_node *nodes, const int *edges, char *mask, char *updating, const char *visited,
	int *cost, int n)
{
	bfs1<<<blocks(n), THREADS>>>(nodes, edges, mask, updating, visited, cost, n);
	launched("bfs1");
}

extern "C" void k_bfs2(char *mask, char *updating, char *visited, char *over, int n)
{
	bfs2<<<blocks(n), THREADS>>>(mask, updating, visited, over, n);
	launched("bfs2");
}
