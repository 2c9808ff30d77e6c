/* StarPU's own per-task floor, no tiletrain: the work of benchmarks/task_overhead.py (c = a + b
 * over N tiles of `tile` float32, one task per tile, output tiles registered with no home
 * node as tiletrain's are) written directly against StarPU 1.3 in C.  As tiletrain does by
 * default (pause_when_idle), the workers are paused (starpu_pause) after each wait, so that
 * their polling leaves the submitting thread its core, and resumed before submitting.
 * Prints one line:
 *   <register us/tile> <submit us/task> <submit CPU us/task> <end-to-end us/task> <unregister_submit us/tile>
 * (submit CPU: the submitting thread's CPU time, which other processes on the cores do not inflate)
 * (medians over reps).  Built and run by benchmarks/task_overhead.py:
 *   cc -O2 starpu_floor.c $(pkg-config --cflags --libs starpu-1.3) -o starpu_floor
 *   ./starpu_floor SCHED NCPU NTILES TILE REPS */
#include <starpu.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void add_cpu(void *buffers[], void *cl_arg)
{
    (void)cl_arg;
    const float *a = (const float *)STARPU_VECTOR_GET_PTR(buffers[0]);
    const float *b = (const float *)STARPU_VECTOR_GET_PTR(buffers[1]);
    float *c = (float *)STARPU_VECTOR_GET_PTR(buffers[2]);
    unsigned n = STARPU_VECTOR_GET_NX(buffers[0]);
    for (unsigned i = 0; i < n; i++)
        c[i] = a[i] + b[i];
}

static struct starpu_codelet add_cl = {
    .cpu_funcs = {add_cpu},
    .nbuffers = 3,
    .modes = {STARPU_R, STARPU_R, STARPU_W},
    .name = "add",
};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s SCHED NCPU NTILES TILE REPS\n", argv[0]);
        return 2;
    }
    const char *sched = argv[1];
    int ncpu = atoi(argv[2]), ntiles = atoi(argv[3]), tile = atoi(argv[4]), reps = atoi(argv[5]);
    if (ncpu < 1 || ntiles < 1 || tile < 1 || reps < 1 || reps > 1000) {
        fprintf(stderr, "starpu_floor: bad arguments\n");
        return 2;
    }
    struct starpu_conf conf;
    starpu_conf_init(&conf);
    conf.ncpus = ncpu;
    conf.nopencl = 0;
    conf.ncuda = 0;
    conf.sched_policy_name = sched;
    conf.catch_signals = 0;
    if (starpu_init(&conf) != 0) {
        fprintf(stderr, "starpu_floor: starpu_init failed\n");
        return 1;
    }
    float *x = malloc(sizeof(float) * (size_t)ntiles * tile);
    starpu_data_handle_t *a = malloc(sizeof *a * ntiles), *b = malloc(sizeof *b * ntiles),
                         *c = malloc(sizeof *c * ntiles);
    double *reg = malloc(sizeof(double) * reps), *sub = malloc(sizeof(double) * reps), *subc = malloc(sizeof(double) * reps),
           *e2e = malloc(sizeof(double) * reps), *unreg = malloc(sizeof(double) * reps);
    if (!x || !a || !b || !c || !reg || !sub || !subc || !e2e || !unreg) {
        fprintf(stderr, "starpu_floor: out of memory\n");
        return 1;
    }
    for (long i = 0; i < (long)ntiles * tile; i++)
        x[i] = (float)i;
    for (int i = 0; i < ntiles; i++) {
        starpu_vector_data_register(&a[i], STARPU_MAIN_RAM, (uintptr_t)(x + (long)i * tile), tile, sizeof(float));
        starpu_vector_data_register(&b[i], STARPU_MAIN_RAM, (uintptr_t)(x + (long)i * tile), tile, sizeof(float));
    }
    starpu_task_wait_for_all();
    starpu_pause();
    for (int r = -1; r < reps; r++) { /* r == -1: warm-up */
        double t0 = now();
        for (int i = 0; i < ntiles; i++)
            starpu_vector_data_register(&c[i], -1, 0, tile, sizeof(float));
        double t1 = now(), c1 = cpu_now();
        starpu_resume();
        for (int i = 0; i < ntiles; i++) {
            struct starpu_task *task = starpu_task_create();
            task->cl = &add_cl;
            task->handles[0] = a[i];
            task->handles[1] = b[i];
            task->handles[2] = c[i];
            if (starpu_task_submit(task) != 0) {
                fprintf(stderr, "starpu_floor: submit failed\n");
                return 1;
            }
        }
        double t2 = now(), c2 = cpu_now();
        starpu_task_wait_for_all();
        starpu_pause();
        double t3 = now();
        starpu_resume();
        for (int i = 0; i < ntiles; i++)
            starpu_data_unregister_submit(c[i]);
        double t4 = now();
        starpu_task_wait_for_all();
        starpu_pause();
        if (r >= 0) {
            reg[r] = (t1 - t0) / ntiles * 1e6;
            sub[r] = (t2 - t1) / ntiles * 1e6;
            subc[r] = (c2 - c1) / ntiles * 1e6;
            e2e[r] = (t3 - t1) / ntiles * 1e6;
            unreg[r] = (t4 - t3) / ntiles * 1e6;
        }
    }
    starpu_resume();
    printf("%.3f %.3f %.3f %.3f %.3f\n", median(reg, reps), median(sub, reps), median(subc, reps), median(e2e, reps),
           median(unreg, reps));
    for (int i = 0; i < ntiles; i++) {
        starpu_data_unregister(a[i]);
        starpu_data_unregister(b[i]);
    }
    starpu_shutdown();
    return 0;
}
