/*
 * The kernels of tests/fakes/rodinia_work.c on the fake CUDA runtime: its device
 * memory is host RAM, so each "kernel" is the CPU writing it directly (untraced,
 * as a GPU kernel's writes are): rodinia_kernels.h's per-element bodies in a loop,
 * as tests/gpu/rodinia_kernels.cu runs them one per thread.
 */
#include <math.h>

#include "rodinia_kernels.h"

void k_bp_forward(const float *input, float *input_hidden, float *partial, int in, int hid)
{
	for (int by = 0; by < in / RK_SIDE; by++) {
		float w[RK_SIDE][RK_SIDE];

		for (int ty = 0; ty < RK_SIDE; ty++)
			for (int tx = 0; tx < RK_SIDE; tx++)
				w[ty][tx] = input_hidden[bp_index(hid, by, ty, tx)] * input[RK_SIDE * by + ty + 1];
		for (int two = 2; two <= RK_SIDE; two *= 2)      /* the kernel's reduction, level by level */
			for (int ty = 0; ty < RK_SIDE; ty += two)
				for (int tx = 0; tx < RK_SIDE; tx++)
					w[ty][tx] += w[ty + two / 2][tx];
		for (int ty = 0; ty < RK_SIDE; ty++)
			for (int tx = 0; tx < RK_SIDE; tx++)
				input_hidden[bp_index(hid, by, ty, tx)] = w[ty][tx];
		for (int ty = 0; ty < RK_SIDE; ty++)
			partial[by * hid + ty] = w[0][ty];
	}
}

void k_bp_adjust(const float *delta, int hid, const float *ly, int in, float *w, float *oldw)
{
	for (int by = 0; by < in / RK_SIDE; by++)
		for (int ty = 0; ty < RK_SIDE; ty++)
			for (int tx = 0; tx < RK_SIDE; tx++)
				bp_adjust_one(delta, hid, ly, w, oldw, by, ty, tx);
	for (int tx = 0; tx < RK_SIDE; tx++)
		bp_adjust_bias(delta, w, oldw, tx);
}

void k_sc_cost(int num, int dim, long x, const sc_point *p, int K, int stride, const float *coord,
	float *work_mem, const int *center_table, char *switch_membership)
{
	for (int i = 0; i < num; i++)
		sc_cost_one(i, num, dim, x, p, K, stride, coord, work_mem, center_table, switch_membership);
}

void k_cfd_init(int nelr, float *vars)
{
	for (int i = 0; i < nelr; i++)
		cfd_init_one(i, nelr, vars);
}

void k_cfd_step_factor(int nelr, const float *vars, const float *areas, float *step)
{
	for (int i = 0; i < nelr; i++)
		cfd_step_factor_one(i, nelr, vars, areas, step);
}

void k_cfd_flux(int nelr, const int *ese, const float *normals, const float *vars, float *fluxes)
{
	for (int i = 0; i < nelr; i++)
		cfd_flux_one(i, nelr, ese, normals, vars, fluxes);
}

void k_cfd_time_step(int j, int nelr, const float *old, float *vars, const float *step, const float *fluxes)
{
	for (int i = 0; i < nelr; i++)
		cfd_time_step_one(i, j, nelr, old, vars, step, fluxes);
}

void k_bfs(const bfs_node *nodes, const int *edges, char *mask, char *updating, const char *visited, int *cost, int n)
{
	for (int tid = 0; tid < n; tid++)
		bfs1_one(tid, nodes, edges, mask, updating, visited, cost);
}

void k_bfs2(char *mask, char *updating, char *visited, char *over, int n)
{
	for (int tid = 0; tid < n; tid++)
		bfs2_one(tid, mask, updating, visited, over);
}
