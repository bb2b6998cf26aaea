/*
 * The kernels of tests/fakes/rodinia_work.c on the fake CUDA runtime: its device
 * memory is host RAM, so each "kernel" is the CPU writing it directly (untraced,
 * as a GPU kernel's writes are). Same reads and writes as tests/gpu/rodinia_kernels.cu.
 */
#include <math.h>

#include "rodinia_kernels.h"

#define ETA 0.3f
#define MOMENTUM 0.3f
#define SIDE 16 /* backprop's HEIGHT and WIDTH */

void k_bp_forward(const float *input, float *input_hidden, float *partial, int in, int hid)
{
	for (int by = 0; by < in / SIDE; by++) {
		float w[SIDE][SIDE];

		for (int ty = 0; ty < SIDE; ty++)
			for (int tx = 0; tx < SIDE; tx++)
				w[ty][tx] = input_hidden[(hid + 1) * SIDE * by + (hid + 1) * ty + tx + 1 + (hid + 1)] *
					input[SIDE * by + ty + 1];
		for (int two = 2; two <= SIDE; two *= 2)
			for (int ty = 0; ty < SIDE; ty += two)
				for (int tx = 0; tx < SIDE; tx++)
					w[ty][tx] += w[ty + two / 2][tx];
		for (int ty = 0; ty < SIDE; ty++)
			for (int tx = 0; tx < SIDE; tx++)
				input_hidden[(hid + 1) * SIDE * by + (hid + 1) * ty + tx + 1 + (hid + 1)] = w[ty][tx];
		for (int ty = 0; ty < SIDE; ty++)
			partial[by * hid + ty] = w[0][ty];
	}
}

void k_bp_adjust(const float *delta, int hid, const float *ly, int in, float *w, float *oldw)
{
	for (int by = 0; by < in / SIDE; by++)
		for (int ty = 0; ty < SIDE; ty++)
			for (int tx = 0; tx < SIDE; tx++) {
				int index = (hid + 1) * SIDE * by + (hid + 1) * ty + tx + 1 + (hid + 1);
				float change = ETA * delta[tx + 1] * ly[SIDE * by + ty + 1] + MOMENTUM * oldw[index];

				w[index] += change;
				oldw[index] = change;
			}
	for (int tx = 0; tx < SIDE; tx++) {
		float change = ETA * delta[tx + 1] + MOMENTUM * oldw[tx + 1];

		w[tx + 1] += change;
		oldw[tx + 1] = change;
	}
}

void k_sc_cost(int num, int dim, long x, const sc_point *p, int K, int stride, const float *coord,
	float *work_mem, const int *center_table, char *switch_membership)
{
	for (int i = 0; i < num; i++) {
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
}

#define NVAR 5
#define NNB 4
void k_cfd_init(int nelr, float *vars)
{
	static const float ff[NVAR] = { 1.4f, 1.68f, 0.0293f, 0.0f, 3.508f };

	for (int j = 0; j < NVAR; j++)
		for (int i = 0; i < nelr; i++)
			vars[i + j * nelr] = ff[j];
}

void k_cfd_step_factor(int nelr, const float *vars, const float *areas, float *step)
{
	for (int i = 0; i < nelr; i++)
		step[i] = 0.5f / (sqrtf(areas[i]) * (fabsf(vars[i]) + fabsf(vars[i + nelr]) + 1.0f));
}

void k_cfd_flux(int nelr, const int *ese, const float *normals, const float *vars, float *fluxes)
{
	for (int i = 0; i < nelr; i++)
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

void k_cfd_time_step(int j, int nelr, const float *old, float *vars, const float *step, const float *fluxes)
{
	for (int v = 0; v < NVAR; v++)
		for (int i = 0; i < nelr; i++)
			vars[i + v * nelr] = old[i + v * nelr] + step[i] / (float) (3 + 1 - j) * fluxes[i + v * nelr] + 1e-3f;
}

void k_bfs(const bfs_node *nodes, const int *edges, char *mask, char *updating, const char *visited, int *cost, int n)
{
	for (int tid = 0; tid < n; tid++) {
		if (!mask[tid])
			continue;
		mask[tid] = 0;
		for (int i = nodes[tid].starting; i < nodes[tid].no_of_edges + nodes[tid].starting; i++) {
			int id = edges[i];

			if (!visited[id]) {
				cost[id] = cost[tid] + 1;
				updating[id] = 1;
			}
		}
	}
}

void k_bfs2(char *mask, char *updating, char *visited, char *over, int n)
{
	for (int tid = 0; tid < n; tid++)
		if (updating[tid]) {
			mask[tid] = 1;
			visited[tid] = 1;
			*over = 1;
			updating[tid] = 0;
		}
}
