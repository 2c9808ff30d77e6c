/* The runtime's shared state, below every other core file: the last error, whether a session
 * runs (and its id and config), the gate that tt_shutdown closes, the list of live tensors and
 * their bytes, the current priority, whether the workers are paused, whether MPI is on and
 * this process' rank.  It calls StarPU and nothing else of tiletrain's, so every core file can
 * use it without a loop; csrc/session.c (the top) starts and stops the session through it. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include <starpu.h>

#include "tt_internal.h"

#ifndef TT_VERSION_STRING
#error "TT_VERSION_STRING must be defined by the build"
#endif

static __thread char errbuf[1024];
static int initialized = 0;
static uint64_t session_counter = 0;
static pthread_mutex_t tensors_mutex = PTHREAD_MUTEX_INITIALIZER;
static struct tt_tensor *live_tensors = NULL;
static int current_priority = 0;
static int64_t bytes_live = 0;    /* under tensors_mutex */
static int64_t bytes_created = 0; /* under tensors_mutex */

/* StarPU-MPI's state (set by csrc/mpi.c's start and stop): read on the submission fast path */
int tt_mpi_on = 0;
int tt_world_rank = 0, tt_world_size = 1;

int tt_mpi_rank(void) { return tt_world_rank; }

int tt_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(errbuf, sizeof errbuf, fmt, ap);
    va_end(ap);
    return code;
}

const char *tt_last_error(void) { return errbuf; }
const char *tt_version(void) { return TT_VERSION_STRING; }
int tt_abi_version(void) { return TT_ABI_VERSION; }
int tt_is_initialized(void) { return initialized; }
int tt_session_active(void) { return initialized; }
uint64_t tt_session_id(void) { return initialized ? session_counter : 0; }
uint64_t tt_current_session(void) { return session_counter; }
void tt_set_priority(int priority) { current_priority = priority; }
int tt_get_priority(void) { return current_priority; }

/* tt_init (running 1: a new session) and tt_shutdown (0) */
void tt_session_set_running(int running)
{
    if (running)
        session_counter++;
    initialized = running;
}

/* A copy of tt_init's config: what the other files read of it (the reuse cap, the tt-cp
 * policy's settings, ...) without a getenv of their own (tiletrain/config.py reads the
 * environment).  sched points to the caller's string: not kept. */
static tt_config session_cfg;

void tt_config_store(const tt_config *cfg)
{
    session_cfg = *cfg;
    session_cfg.sched = NULL;
}

const tt_config *tt_config_current(void) { return &session_cfg; }

void tt_tensors_lock(void) { pthread_mutex_lock(&tensors_mutex); }
void tt_tensors_unlock(void) { pthread_mutex_unlock(&tensors_mutex); }

void tt_tensors_link(struct tt_tensor *t)
{
    t->prev = NULL;
    t->next = live_tensors;
    if (live_tensors)
        live_tensors->prev = t;
    live_tensors = t;
}

void tt_tensors_unlink(struct tt_tensor *t)
{
    if (t->prev)
        t->prev->next = t->next;
    else if (live_tensors == t)
        live_tensors = t->next;
    if (t->next)
        t->next->prev = t->prev;
    t->prev = t->next = NULL;
}

/* The live tensor whose tiles include h (error messages only: a scan of every tile). */
tt_tensor *tt_tensor_of_handle(starpu_data_handle_t h)
{
    tt_tensor *found = NULL;
    tt_tensors_lock();
    for (struct tt_tensor *t = live_tensors; t && !found; t = t->next)
        for (int64_t i = 0; i < t->ntiles; i++)
            if (t->handles[i] == h) {
                found = t;
                break;
            }
    tt_tensors_unlock();
    return found;
}

/* At shutdown (tt_tensors_kill_all, csrc/session.c; under the tensors lock): the live list,
 * emptied, and the byte counters reset. */
struct tt_tensor *tt_tensors_detach_all(void)
{
    struct tt_tensor *t = live_tensors;
    live_tensors = NULL;
    bytes_live = 0;
    bytes_created = 0;
    return t;
}

void tt_bytes_live_locked_add(int64_t delta)
{
    bytes_live += delta;
    if (delta > 0)
        bytes_created += delta;
}

int64_t tt_bytes_created(void) { return bytes_created; }

int64_t tt_bytes_live(void) { return bytes_live; }

/* The gate between the threads that call into the runtime and tt_shutdown (issue 16): every
 * C entry that touches StarPU from outside (a task submission, a tensor's registration,
 * unregistration or transfer, a pause, a wait) holds it for the call -- one atomic add and
 * load.  tt_shutdown closes it, waits until no call holds it, and only then stops StarPU, so
 * a racing call either completes before the shutdown or fails with a clear error. */
enum { GATE_CLOSED = 0, GATE_OPEN = 1, GATE_CLOSING = 2 };
static int gate_state = GATE_CLOSED;
static int gate_users = 0;

int tt_gate_enter(const char *what)
{
    __atomic_add_fetch(&gate_users, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&gate_state, __ATOMIC_SEQ_CST) == GATE_OPEN)
        return TT_OK;
    __atomic_sub_fetch(&gate_users, 1, __ATOMIC_SEQ_CST);
    return tt_error(TT_ENOTINIT, "%s: the tiletrain runtime was shut down (or is not initialised)", what);
}

void tt_gate_leave(void) { __atomic_sub_fetch(&gate_users, 1, __ATOMIC_SEQ_CST); }

void tt_gate_wait_closed(void)
{
    while (__atomic_load_n(&gate_state, __ATOMIC_SEQ_CST) == GATE_CLOSING) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

/* tt_init opens the gate once the session is up; tt_shutdown closes it in two steps. */
void tt_gate_open(void) { __atomic_store_n(&gate_state, GATE_OPEN, __ATOMIC_SEQ_CST); }

/* Open -> closing, then waits until the calls in flight have left: 0, or -1 when the gate
 * was not open (no session). */
int tt_gate_begin_close(void)
{
    int open = GATE_OPEN;
    if (!__atomic_compare_exchange_n(&gate_state, &open, GATE_CLOSING, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
        return -1;
    while (__atomic_load_n(&gate_users, __ATOMIC_SEQ_CST) > 0) { /* calls in flight finish first */
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

void tt_gate_closed(void) { __atomic_store_n(&gate_state, GATE_CLOSED, __ATOMIC_SEQ_CST); }

const char *tt_sched_name(void)
{
    if (!initialized)
        return "";
    struct starpu_sched_policy *p = starpu_sched_ctx_get_sched_policy(0);
    return p && p->policy_name ? p->policy_name : "";
}

const char *tt_dtype_list(unsigned mask)
{
    static __thread char buf[64];
    static const int order[] = {TT_F32, TT_F64, TT_F16, TT_BF16, TT_I64, TT_BOOL};
    size_t len = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (mask >> order[i] & 1)
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%s", len ? ", " : "", tt_dtype_name(order[i]));
    return buf;
}

static pthread_mutex_t pause_mutex = PTHREAD_MUTEX_INITIALIZER;
static int paused = 0;

void tt_ensure_running(void)
{
    if (!__atomic_load_n(&paused, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&pause_mutex);
    if (paused) {
        starpu_resume();
        __atomic_store_n(&paused, 0, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&pause_mutex);
}

int tt_pause_idle(void) /* inside the gate */
{
    if (tt_mpi_on)
        return 0; /* never under MPI: other ranks' transfers need this rank's workers and MPI thread */
    int did = 0;
    pthread_mutex_lock(&pause_mutex);
    if (!paused && starpu_task_nsubmitted() == 0) {
        starpu_pause();
        __atomic_store_n(&paused, 1, __ATOMIC_RELEASE);
        did = 1;
    }
    pthread_mutex_unlock(&pause_mutex);
    return did;
}

int tt_pause_if_idle(void)
{
    if (tt_mpi_on)
        return 0;
    int rc = tt_gate_enter("pause");
    if (rc)
        return rc;
    int did = tt_pause_idle();
    tt_gate_leave();
    return did;
}

int tt_is_paused(void) { return __atomic_load_n(&paused, __ATOMIC_ACQUIRE); }
