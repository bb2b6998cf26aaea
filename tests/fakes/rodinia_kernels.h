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
#endif
