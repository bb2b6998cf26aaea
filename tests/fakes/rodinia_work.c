/*
 * Stand-ins for four Rodinia programs in which GVProf (SC'20, GVProf/GVProf-samples,
 * findings in GVProf's docs/rodinia.md) found redundant copies, each as the original
 * and as GVProf's fix: the host code's CUDA calls in the same order, with the same
 * sizes and the same data flow, on the real runtime API (cudaMalloc, cudaMemcpy,
 * cudaMemset, cudaFree); kernels through tests/fakes/rodinia_kernels.h (the fake
 * runtime: rodinia_kernels_fake.c; a GPU: tests/gpu/rodinia_kernels.cu, built by nvcc).
 * Not their code: written from the findings and the call sequences.
 *
 *   rodinia_work PROGRAM VARIANT LOG [SIZE]
 *     PROGRAM  backprop | streamcluster | cfd | bfs
 *     VARIANT  orig | fix
 *
 * The findings (what each fix removes):
 *   backprop       net->input_units is uploaded (HtoD) and copied back (DtoH) after the
 *                  weight-adjust kernel, which only reads it: the copy-back moves nothing
 *                  (fix: no copy-back).
 *   streamcluster  every pgain iteration re-uploads the point array p, also when no point
 *                  changed since the last upload (fix: upload p only after a change).
 *   cfd            iteration 0 copies variables to old_variables (DtoD), which the same
 *                  initialisation kernel already filled with the same values (fix: no
 *                  copy in iteration 0).
 *   bfs            the frontier, updating and visited masks are uploaded from host arrays
 *                  that are all zeros but one byte (fix: cudaMemset).
 *
 * LOG gets one JSON line per copy or memset, in call order, with what the program knows
 * about it: "truth" is "redundant" when the destination already held every byte copied
 * (by the program's own data flow: nothing wrote either side since they last matched),
 * "" otherwise; "zero" is 1 for an upload whose host source held only zeros (a memset
 * could write it: what memq's zero_content advice rule finds); "finding" names the
 * GVProf finding the call belongs to, "why" says how the truth follows. Exit 0, 1 when
 * a call failed, 2 on bad arguments.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rodinia_kernels.h"

/* The CUDA runtime's C API (cuda_runtime_api.h's signatures; enums as int). */
int cudaMalloc(void **, size_t);
int cudaFree(void *);
int cudaMemcpy(void *, const void *, size_t, int);
int cudaMemset(void *, int, size_t);
int cudaDeviceSynchronize(void);

enum { H2D = 1, D2H = 2, D2D = 3 };
static const char *const DIRECTION[] = { "HtoH", "HtoD", "DtoH", "DtoD" };

static FILE *out;
static int failed, seq;
static const char *program, *variant;

static void fail_on(int r, const char *what)
{
	if (r) {
		fprintf(stderr, "rodinia_work: %s returned %d\n", what, r);
		failed = 1;
	}
}

static void head(const char *op, const char *api)
{
	fprintf(out, "{\"pid\": %d, \"program\": \"%s\", \"variant\": \"%s\", \"seq\": %d, \"op\": \"%s\", "
		"\"api\": \"%s\"", (int) getpid(), program, variant, seq++, op, api);
}

/* Whether a host source holds only zeros (what a memset could write); device sources: 0 (not read). */
static int all_zero(const void *src, size_t n, int kind)
{
	const unsigned char *b = src;

	if (kind != H2D)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (b[i])
			return 0;
	return 1;
}

/* A cudaMemcpy's line in the log, with the program's knowledge of it ("zero": its host source was all
 * zeros when it was copied). */
static void log_copy(void *dst, const void *src, size_t n, int kind, int zero, const char *truth,
	const char *finding, const char *why)
{
	head("copy", "cudaMemcpy");
	fprintf(out, ", \"direction\": \"%s\", \"bytes\": %zu, \"dst\": %llu, \"src\": %llu, \"zero\": %d, "
		"\"truth\": \"%s\", \"finding\": \"%s\", \"why\": \"%s\"}\n", DIRECTION[kind], n,
		(unsigned long long) (uintptr_t) dst, (unsigned long long) (uintptr_t) src, zero, truth, finding, why);
}

/* cudaMemcpy whose truth the program knows beforehand. */
static void copy(void *dst, const void *src, size_t n, int kind, const char *truth, const char *finding,
	const char *why)
{
	int zero = all_zero(src, n, kind);

	fail_on(cudaMemcpy(dst, src, n, kind), "cudaMemcpy");
	log_copy(dst, src, n, kind, zero, truth, finding, why);
}

static void set(void *dst, int value, size_t n, const char *finding)
{
	fail_on(cudaMemset(dst, value, n), "cudaMemset");
	head("set", "cudaMemset");
	fprintf(out, ", \"bytes\": %zu, \"dst\": %llu, \"value\": %d, \"finding\": \"%s\"}\n", n,
		(unsigned long long) (uintptr_t) dst, value, finding);
}

static void *dev(size_t n)
{
	void *p = NULL;

	fail_on(cudaMalloc(&p, n), "cudaMalloc");
	return p;
}

static void *host(size_t n)
{
	void *p = calloc(1, n);

	if (!p) {
		perror("rodinia_work");
		exit(1);
	}
	return p;
}

/* A deterministic generator (the programs' inputs: Rodinia reads them from files or rand()). */
static uint32_t rng = 7;
static uint32_t next(void)
{
	rng = rng * 1664525u + 1013904223u;
	return rng >> 8;
}
static float unit(void) { return (float) (next() & 0xffff) / 65536.0f; }

/* ---- backprop (backprop_cuda.cu: bpnn_train_cuda, one training pass, hid = 16) -------------- */
static void backprop(int in)
{
	const int hid = 16, blocks = in / 16;
	size_t wbytes = (size_t) (in + 1) * (hid + 1) * sizeof(float);
	float *input_units = host((in + 1) * sizeof(float)), *hidden_delta = host((hid + 1) * sizeof(float));
	float *weights = host(wbytes), *prev_weights = host(wbytes), *partial = host(blocks * hid * sizeof(float));

	for (int i = 1; i <= in; i++)
		input_units[i] = unit();
	for (size_t i = 0; i < wbytes / sizeof(float); i++)
		weights[i] = unit() - 0.5f;                          /* prev_weights: zeros */
	float *input_cuda = dev((in + 1) * sizeof(float)), *output_hidden = dev((hid + 1) * sizeof(float));
	float *input_hidden = dev(wbytes), *partial_cuda = dev(blocks * hid * sizeof(float));

	copy(input_cuda, input_units, (in + 1) * sizeof(float), H2D, "", "backprop.input_units",
	     "the first upload of input_units");
	copy(input_hidden, weights, wbytes, H2D, "", "", "the first upload of the weights");
	k_bp_forward(input_cuda, input_hidden, partial_cuda, in, hid);
	copy(partial, partial_cuda, blocks * hid * sizeof(float), D2H, "", "", "partial sums the kernel wrote");
	for (int j = 1; j <= hid; j++) {                             /* the CPU part of the forward pass */
		float sum = 0;

		for (int k = 0; k < blocks; k++)
			sum += partial[k * hid + j - 1];
		hidden_delta[j] = 1.0f / (1.0f + expf(-sum)) - 0.5f;
	}
	float *delta_cuda = dev((hid + 1) * sizeof(float)), *prev_cuda = dev(wbytes);

	copy(delta_cuda, hidden_delta, (hid + 1) * sizeof(float), H2D, "", "", "the first upload of the delta");
	copy(prev_cuda, prev_weights, wbytes, H2D, "", "", "the first upload of the previous weights");
	copy(input_hidden, weights, wbytes, H2D, "", "",
	     "the forward kernel overwrote input_hidden in place: this restores the weights");
	k_bp_adjust(delta_cuda, hid, input_cuda, in, input_hidden, prev_cuda);
	if (strcmp(variant, "orig") == 0)
		copy(input_units, input_cuda, (in + 1) * sizeof(float), D2H, "redundant", "backprop.input_units",
		     "no kernel wrote input_cuda and the CPU did not write input_units since the upload");
	copy(weights, input_hidden, wbytes, D2H, "", "", "the weights the adjust kernel wrote");
	fail_on(cudaFree(input_cuda), "cudaFree");
	fail_on(cudaFree(output_hidden), "cudaFree");
	fail_on(cudaFree(input_hidden), "cudaFree");
	fail_on(cudaFree(partial_cuda), "cudaFree");
	fail_on(cudaFree(prev_cuda), "cudaFree");
	fail_on(cudaFree(delta_cuda), "cudaFree");
	free(partial);
	free(weights);
	free(prev_weights);
	free(hidden_delta);
	free(input_units);
}

/* ---- streamcluster (streamcluster_cuda.cu: pgain, called once per candidate x) ------------- */
static void streamcluster(int num)
{
	const int dim = 16, iterations = 12, fix = strcmp(variant, "fix") == 0;
	sc_point *points = host(num * sizeof(sc_point));
	float *coords = host((size_t) num * dim * sizeof(float)), *coord_h = host((size_t) num * dim * sizeof(float));
	int *center_table = host(num * sizeof(int));
	char *is_center = host(num), *switch_membership = host(num);
	int uploaded_p = 0, p_changed = 1, centers = 1, uploaded_table = 0, table_changed = 1;

	for (int i = 0; i < num; i++) {
		points[i] = (sc_point) { 1.0f, &coords[i * dim], 0, 0 };
		for (int d = 0; d < dim; d++)
			coords[i * dim + d] = (float) (i % 4) * 4.0f + unit();  /* four clusters */
	}
	is_center[0] = 1;
	for (int i = 0; i < num; i++) {
		float d = 0;

		for (int l = 0; l < dim; l++)
			d += (coords[i * dim + l] - coords[l]) * (coords[i * dim + l] - coords[l]);
		points[i].cost = d;
	}
	float *coord_d = dev((size_t) num * dim * sizeof(float));
	int *center_table_d = dev(num * sizeof(int));
	char *switch_d = dev(num);
	sc_point *p = dev(num * sizeof(sc_point));

	for (int iter = 0; iter < iterations; iter++) {
		long x = (long) (iter * 7919 + 1) % num;                  /* the candidate center */
		int K = centers, stride = K + 1, count = 0;
		float *work_mem_h = host((size_t) stride * (num + 1) * sizeof(float));

		for (int i = 0; i < num; i++)
			if (is_center[i])
				center_table[i] = count++;
		if (iter == 0) {
			for (int l = 0; l < dim; l++)
				for (int j = 0; j < num; j++)
					coord_h[num * l + j] = coords[j * dim + l];
		}
		float *work_mem_d = dev((size_t) stride * (num + 1) * sizeof(float));

		if (iter == 0)
			copy(coord_d, coord_h, (size_t) num * dim * sizeof(float), H2D, "", "", "the first upload of coord");
		/* The table changes only when a center opened (GVProf's fix uploads it every time too). */
		copy(center_table_d, center_table, num * sizeof(int), H2D, uploaded_table && !table_changed ?
		     "redundant" : "", "", uploaded_table && !table_changed ? "no center opened since the last upload" :
		     "a center opened since the last upload (or the first upload): one entry changed");
		uploaded_table = 1;
		table_changed = 0;
		if (!fix || p_changed) {
			/* An upload of unchanged points: the kernel only reads p, the CPU did not touch them. */
			copy(p, points, num * sizeof(sc_point), H2D, uploaded_p && !p_changed ? "redundant" : "",
			     "streamcluster.p", uploaded_p && !p_changed ? "no point changed since the last upload of p" :
			     "the points changed since the last upload (or the first upload)");
			uploaded_p = 1;
			p_changed = 0;
		}
		set(switch_d, 0, num, "");
		set(work_mem_d, 0, (size_t) stride * (num + 1) * sizeof(float), "");
		k_sc_cost(num, dim, x, p, K, stride, coord_d, work_mem_d, center_table_d, switch_d);
		copy(work_mem_h, work_mem_d, (size_t) stride * (num + 1) * sizeof(float), D2H, "", "",
		     "the costs the kernel wrote");
		copy(switch_membership, switch_d, num, D2H, "", "", "the membership the kernel wrote");
		float gain = 0;                                             /* the CPU part of pgain */
		for (int i = 0; i < num; i++)
			gain += work_mem_h[i * stride + K];
		if (gain < -0.5f * num && !is_center[x]) {                  /* opening x saves cost: do it */
			for (int i = 0; i < num; i++)
				if (switch_membership[i]) {
					float d = 0;

					for (int l = 0; l < dim; l++)
						d += (coords[i * dim + l] - coords[x * dim + l]) *
							(coords[i * dim + l] - coords[x * dim + l]);
					points[i].cost = d * points[i].weight;
					points[i].assign = x;
					p_changed = 1;
				}
			is_center[x] = 1;
			centers++;
			table_changed = 1;
		}
		fail_on(cudaFree(work_mem_d), "cudaFree");
		free(work_mem_h);
	}
	fail_on(cudaFree(center_table_d), "cudaFree");
	fail_on(cudaFree(switch_d), "cudaFree");
	fail_on(cudaFree(p), "cudaFree");
	fail_on(cudaFree(coord_d), "cudaFree");
	free(points);
	free(coords);
	free(coord_h);
	free(center_table);
	free(is_center);
	free(switch_membership);
}

/* ---- cfd (euler3d.cu: main, a generated mesh in place of fvcorr.domn.097K) ---------------------- */
static void cfd(int nelr)
{
	const int NVAR = 5, NNB = 4, NDIM = 3, RK = 3, iterations = 6;
	float *h_areas = host(nelr * sizeof(float)), *h_normals = host((size_t) nelr * NDIM * NNB * sizeof(float));
	int *h_ese = host((size_t) nelr * NNB * sizeof(int));
	float *h_vars = host((size_t) nelr * NVAR * sizeof(float));

	for (int i = 0; i < nelr; i++) {
		h_areas[i] = 0.5f + unit();
		for (int j = 0; j < NNB; j++) {
			h_ese[i + j * nelr] = (i + 1 + j * 37) % nelr;
			for (int k = 0; k < NDIM; k++)
				h_normals[i + (j + k * NNB) * nelr] = unit() - 0.5f;
		}
	}
	float *areas = dev(nelr * sizeof(float)), *normals = dev((size_t) nelr * NDIM * NNB * sizeof(float));
	int *ese = dev((size_t) nelr * NNB * sizeof(int));

	copy(areas, h_areas, nelr * sizeof(float), H2D, "", "", "the mesh's areas");
	copy(ese, h_ese, (size_t) nelr * NNB * sizeof(int), H2D, "", "", "the mesh's neighbours");
	copy(normals, h_normals, (size_t) nelr * NDIM * NNB * sizeof(float), H2D, "", "", "the mesh's normals");
	size_t vbytes = (size_t) nelr * NVAR * sizeof(float);
	float *variables = dev(vbytes), *old_variables = dev(vbytes), *fluxes = dev(vbytes);
	float *step_factors = dev(nelr * sizeof(float));

	k_cfd_init(nelr, variables);
	k_cfd_init(nelr, old_variables);
	k_cfd_init(nelr, fluxes);
	set(step_factors, 0, nelr * sizeof(float), "");
	fail_on(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	for (int i = 0; i < iterations; i++) {
		if (i == 0 && strcmp(variant, "orig") == 0)
			copy(old_variables, variables, vbytes, D2D, "redundant", "cfd.old_variables",
			     "initialize_variables filled old_variables with the same values as variables");
		else if (i > 0)
			copy(old_variables, variables, vbytes, D2D, "", "cfd.old_variables",
			     "time_step wrote variables in the previous iteration");
		k_cfd_step_factor(nelr, variables, areas, step_factors);
		for (int j = 0; j < RK; j++) {
			k_cfd_flux(nelr, ese, normals, variables, fluxes);
			k_cfd_time_step(j, nelr, old_variables, variables, step_factors, fluxes);
		}
	}
	fail_on(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	copy(h_vars, variables, vbytes, D2H, "", "", "the solution (dump)");
	fail_on(cudaFree(areas), "cudaFree");
	fail_on(cudaFree(ese), "cudaFree");
	fail_on(cudaFree(normals), "cudaFree");
	fail_on(cudaFree(variables), "cudaFree");
	fail_on(cudaFree(old_variables), "cudaFree");
	fail_on(cudaFree(fluxes), "cudaFree");
	fail_on(cudaFree(step_factors), "cudaFree");
	free(h_areas);
	free(h_normals);
	free(h_ese);
	free(h_vars);
}

/* ---- bfs (bfs.cu: BFSGraph, a generated graph of Rodinia's format: 6 edges per node) -------- */
static void bfs(int n)
{
	const int degree = 6, fix = strcmp(variant, "fix") == 0;
	int edges = n * degree;
	bfs_node *h_nodes = host(n * sizeof(bfs_node));
	int *h_edges = host(edges * sizeof(int)), *h_cost = host(n * sizeof(int));
	char *h_mask = NULL, *h_updating = NULL, *h_visited = host(n);

	for (int i = 0; i < n; i++) {
		h_nodes[i] = (bfs_node) { i * degree, degree };
		for (int e = 0; e < degree; e++)
			h_edges[i * degree + e] = (int) (next() % (uint32_t) n);
		h_cost[i] = -1;
	}
	h_cost[0] = 0;
	if (!fix) {
		h_mask = host(n);
		h_updating = host(n);
		h_mask[0] = 1;                                             /* the source: node 0 */
		h_visited[0] = 1;
	}
	bfs_node *d_nodes = dev(n * sizeof(bfs_node));
	int *d_edges = dev(edges * sizeof(int)), *d_cost = dev(n * sizeof(int));
	char *d_mask = dev(n), *d_updating = dev(n), *d_visited = dev(n), *d_over = dev(1);

	copy(d_nodes, h_nodes, n * sizeof(bfs_node), H2D, "", "", "the graph's nodes");
	copy(d_edges, h_edges, edges * sizeof(int), H2D, "", "", "the graph's edges");
	if (!fix) {
		copy(d_mask, h_mask, n, H2D, "", "bfs.masks", "all zeros but the source's byte");
		copy(d_updating, h_updating, n, H2D, "", "bfs.masks", "all zeros");
		copy(d_visited, h_visited, n, H2D, "", "bfs.masks", "all zeros but the source's byte");
	} else {
		set(d_mask, 0, n, "bfs.masks");
		set(d_mask, 1, 1, "bfs.masks");
		set(d_updating, 0, n, "bfs.masks");
		set(d_visited, 0, n, "bfs.masks");
		set(d_visited, 1, 1, "bfs.masks");
	}
	copy(d_cost, h_cost, n * sizeof(int), H2D, "", "", "the initial costs");
	char stop;
	int k = 0;

	do {
		stop = 0;
		copy(d_over, &stop, 1, H2D, "", "", "resets the flag Kernel2 may have set");
		k_bfs(d_nodes, d_edges, d_mask, d_updating, d_visited, d_cost, n);
		k_bfs2(d_mask, d_updating, d_visited, d_over, n);
		/* Whether Kernel2 set the flag shows after the copy: when it did not, the copy wrote 0 over 0. */
		fail_on(cudaMemcpy(&stop, d_over, 1, D2H), "cudaMemcpy");
		log_copy(&stop, d_over, 1, D2H, 0, stop ? "" : "redundant", "", stop ?
			 "Kernel2 set the flag: the frontier was not empty" :
			 "Kernel2 left the flag 0, which stop already held: the last level");
		k++;
	} while (stop);
	copy(h_cost, d_cost, n * sizeof(int), D2H, "", "", "the result");
	fprintf(stderr, "rodinia_work: bfs: %d levels\n", k);
	fail_on(cudaFree(d_nodes), "cudaFree");
	fail_on(cudaFree(d_edges), "cudaFree");
	fail_on(cudaFree(d_mask), "cudaFree");
	fail_on(cudaFree(d_updating), "cudaFree");
	fail_on(cudaFree(d_visited), "cudaFree");
	fail_on(cudaFree(d_cost), "cudaFree");
	fail_on(cudaFree(d_over), "cudaFree");
	free(h_nodes);
	free(h_edges);
	free(h_cost);
	free(h_mask);
	free(h_updating);
	free(h_visited);
}

int main(int argc, char **argv)
{
	static const struct { const char *name; void (*run)(int); int size; } programs[] = {
		{ "backprop", backprop, 65536 }, { "streamcluster", streamcluster, 8192 },
		{ "cfd", cfd, 16384 }, { "bfs", bfs, 65536 },
	};

	if (argc < 4 || (strcmp(argv[2], "orig") && strcmp(argv[2], "fix"))) {
		fprintf(stderr, "usage: rodinia_work backprop|streamcluster|cfd|bfs orig|fix LOG [SIZE]\n");
		return 2;
	}
	program = argv[1];
	variant = argv[2];
	for (size_t i = 0; i < sizeof(programs) / sizeof(programs[0]); i++) {
		if (strcmp(program, programs[i].name))
			continue;
		int size = argc > 4 ? atoi(argv[4]) : programs[i].size;

		if (size < 16 || size % 16) {
			fprintf(stderr, "rodinia_work: SIZE %s: a multiple of 16, at least 16\n", argv[4]);
			return 2;
		}
		out = fopen(argv[3], "w");
		if (!out) {
			perror(argv[3]);
			return 2;
		}
		programs[i].run(size);
		fclose(out);
		return failed;
	}
	fprintf(stderr, "rodinia_work: no program %s\n", program);
	return 2;
}
