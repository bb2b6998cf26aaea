/*
 * The kernels of tests/fakes/rodinia_work.c, one C entry point each, so one host
 * program runs on two devices:
 *   tests/fakes/rodinia_kernels_fake.c  the fake CUDA runtime (its device memory is
 *                                       host RAM: the "kernels" write it directly,
 *                                       writes no trace sees, as a GPU's are)
 *   tests/gpu/rodinia_kernels.cu        a real GPU (nvcc: the kernels launched on the
 *                                       default stream, in order with cudaMemcpy)
 * Each reads and writes exactly the arrays its Rodinia original does (GVProf-samples:
 * backprop, streamcluster, cfd, bfs); the arithmetic is simpler where only the data
 * flow matters for the copies.
 */
#ifndef RODINIA_KERNELS_H
#define RODINIA_KERNELS_H

#ifndef __CUDACC__
#include <math.h>
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* streamcluster's point: the layout of Rodinia's Point (32 bytes). */
typedef struct {
	float weight;
	float *coord;
	long assign;
	float cost;
} sc_point;

/* backprop: bpnn_layerforward_CUDA reads input and input_hidden, writes input_hidden (its
 * reduction's partial products, in place) and partial[num_blocks * hid]; bpnn_adjust_weights_cuda
 * reads delta and ly (= input), writes w and oldw. in is a multiple of 16. */
void k_bp_forward(const float *input, float *input_hidden, float *partial, int in, int hid);
void k_bp_adjust(const float *delta, int hid, const float *ly, int in, float *w, float *oldw);

/* streamcluster: kernel_compute_cost reads p, coord, center_table; writes work_mem and
 * switch_membership. */
void k_sc_cost(int num, int dim, long x, const sc_point *p, int K, int stride, const float *coord,
	float *work_mem, const int *center_table, char *switch_membership);

/* cfd: initialize_variables writes vars (the far-field values, the same for every element);
 * compute_step_factor reads vars, areas, writes step; compute_flux reads ese, normals, vars, writes
 * fluxes; time_step reads old, step, fluxes, writes vars. */
void k_cfd_init(int nelr, float *vars);
void k_cfd_step_factor(int nelr, const float *vars, const float *areas, float *step);
void k_cfd_flux(int nelr, const int *ese, const float *normals, const float *vars, float *fluxes);
void k_cfd_time_step(int j, int nelr, const float *old, float *vars, const float *step, const float *fluxes);

/* bfs: Kernel and Kernel2 of Rodinia's bfs (frontier expansion, then the mask swap that sets *over). */
typedef struct { int starting; int no_of_edges; } bfs_node;
void k_bfs(const bfs_node *nodes, const int *edges, char *mask, char *updating, const char *visited, int *cost,
	int n);
void k_bfs2(char *mask, char *updating, char *visited, char *over, int n);

#ifdef __cplusplus
}
#endif
/*
 * Per-element bodies, shared by both builds (one thread's work on a GPU, one loop
 * iteration on the fake), so both compute the same values.
 */
#ifdef __CUDACC__
#define RK_ELEMENT __device__ static inline
#else
#define RK_ELEMENT static inline
#endif
#define RK_ETA 0.3f
#define RK_MOMENTUM 0.3f
#define RK_SIDE 16 /* backprop's HEIGHT and WIDTH */
#define RK_NVAR 5
#define RK_NNB 4

/* backprop's weight index of block row by, thread (ty, tx) */
RK_ELEMENT int bp_index(int hid, int by, int ty, int tx)
{
	return (hid + 1) * RK_SIDE * by + (hid + 1) * ty + tx + 1 + (hid + 1);
}

RK_ELEMENT void bp_adjust_one(const float *delta, int hid, const float *ly, float *w, float *oldw, int by, int ty,
	int tx)
{
	int index = bp_index(hid, by, ty, tx);
	float change = RK_ETA * delta[tx + 1] * ly[RK_SIDE * by + ty + 1] + RK_MOMENTUM * oldw[index];

	w[index] += change;
	oldw[index] = change;
}

/* after every bp_adjust_one: the bias row */
RK_ELEMENT void bp_adjust_bias(const float *delta, float *w, float *oldw, int tx)
{
	float change = RK_ETA * delta[tx + 1] + RK_MOMENTUM * oldw[tx + 1];

	w[tx + 1] += change;
	oldw[tx + 1] = change;
}

RK_ELEMENT void sc_cost_one(int i, int num, int dim, long x, const sc_point *p, int K, int stride, const float *coord,
	float *work_mem, const int *center_table, char *switch_membership)
{
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

RK_ELEMENT void cfd_init_one(int i, int nelr, float *vars)
{
	const float ff[RK_NVAR] = { 1.4f, 1.68f, 0.0293f, 0.0f, 3.508f };

	for (int j = 0; j < RK_NVAR; j++)
		vars[i + j * nelr] = ff[j];
}

RK_ELEMENT void cfd_step_factor_one(int i, int nelr, const float *vars, const float *areas, float *step)
{
	step[i] = 0.5f / (sqrtf(areas[i]) * (fabsf(vars[i]) + fabsf(vars[i + nelr]) + 1.0f));
}

RK_ELEMENT void cfd_flux_one(int i, int nelr, const int *ese, const float *normals, const float *vars, float *fluxes)
{
	for (int j = 0; j < RK_NVAR; j++) {
		float f = 0;

		for (int n = 0; n < RK_NNB; n++) {
			int nb = ese[i + n * nelr];

			if (nb >= 0)
				f += normals[i + n * nelr] * (vars[nb + j * nelr] - vars[i + j * nelr]);
		}
		fluxes[i + j * nelr] = f;
	}
}

/* writes element i's variables only, from old, step and fluxes: safe in place */
RK_ELEMENT void cfd_time_step_one(int i, int j, int nelr, const float *old, float *vars, const float *step,
	const float *fluxes)
{
	for (int v = 0; v < RK_NVAR; v++)
		vars[i + v * nelr] = old[i + v * nelr] + step[i] / (float) (3 + 1 - j) * fluxes[i + v * nelr] + 1e-3f;
}

RK_ELEMENT void bfs1_one(int tid, const bfs_node *nodes, const int *edges, char *mask, char *updating,
	const char *visited, int *cost)
{
	if (!mask[tid])
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

RK_ELEMENT void bfs2_one(int tid, char *mask, char *updating, char *visited, char *over)
{
	if (updating[tid]) {
		mask[tid] = 1;
		visited[tid] = 1;
		*over = 1;
		updating[tid] = 0;
	}
}

#endif
