/* thread_pool.c: the thread pool that runs cpu_llvm's parallel regions (thread_pool.py builds it).
 *
 *   void tk_parallel(void (*task)(void*), void* argument, int32_t threads)
 *   int32_t tk_team_size(void)
 *
 * tk_parallel runs task(argument) on the calling thread and on up to threads - 1 pool workers,
 * and returns once every thread that started the task has returned from it. Every task that
 * cpu_llvm emits claims its work from a counter in `argument` until none is left (parallel loops,
 * GEMM work items, a plan level's steps), so any number of threads, one included, completes it.
 * That is what makes a region revocable: when the caller finds no work left, it closes the
 * region, and a worker that has not started yet never will. libgomp's fork/join waits for every
 * thread of the team instead, and on a loaded machine a team thread the OS has not scheduled
 * yet kept a 2-thread run waiting milliseconds for work the caller had already done
 * (shufflenet at 2 threads beside a busy process: 8.5 ms against 3.5 ms at 1 thread).
 *
 * On a loaded machine a worker can still claim a piece and then lose its core: the caller waits
 * for that piece. Workers add up the CPU time they spent on the region's task; when regions take
 * longer than the caller alone would have (its own part plus that CPU time) by more than
 * WASTE_LIMIT of their time (a moving
 * average), or when the caller itself gets less than CALLER_SHARE_LIMIT of its core between the
 * regions of a run, the next regions run on the caller alone (BACKOFF_REGIONS, doubled while the
 * pool keeps failing right after each back-off, for BACKOFF_MAX_SECONDS at most), then the pool is tried again.
 *
 * The region word packs (region number << 32) | CLOSED | active workers; a worker joins with a
 * compare-and-swap that succeeds only while its region is open and not full. Idle workers spin
 * SPIN_ROUNDS pauses, then sleep on a futex, off the core of the caller that last started a region
 * (sleep_off_caller_core). A region started from inside a region (a kernel in
 * a plan level that runs on the pool), or while another thread's region holds the pool, runs on
 * its caller alone.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef void (*tk_task)(void *);

#define CLOSED (1ull << 31)
#define ACTIVE_MASK (CLOSED - 1)
#define MAX_WORKERS 255
#define SPIN_ROUNDS 2000        /* pauses an idle worker spins before it sleeps (~30 us) */
#define WAIT_SPIN_ROUNDS 200    /* pauses the caller spins for its workers' last pieces before it yields */

static _Atomic uint32_t region_number;      /* the futex word: bumped for every region */
static _Atomic uint64_t region_word;        /* (region << 32) | CLOSED | active workers */
static _Atomic int32_t sleepers;
static _Atomic int32_t pool_busy;
static tk_task region_task;
static void *region_argument;
static _Atomic int64_t region_work_ns;      /* the workers' CPU time in the region's task, summed */
static _Atomic int32_t region_team;          /* read by workers before they join: atomic */
static int32_t workers_started;
static int32_t affinity_mode;               /* 0 none, 1 close, 2 spread */
static _Atomic int32_t caller_cpu = -1;     /* the core the last region's caller started it on */
static __thread int32_t team_size = 1;      /* threads of the region this thread runs (1 outside) */
static __thread int32_t in_region;

static void cpu_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void futex_wait(_Atomic uint32_t *word, uint32_t value) {
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
}

static void futex_wake_all(_Atomic uint32_t *word) {
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void pin_worker(int32_t index) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (affinity_mode == 0 || cpus < 2)
        return;
    long cpu = affinity_mode == 1 ? (index + 1) % cpus : ((index + 1) * cpus / (workers_started + 1)) % cpus;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET((int)cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static double seconds_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static double thread_cpu_seconds(void) {
    struct timespec now;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/* A sleeping worker is woken where the kernel's wake-up placement puts it, and on this 2-vCPU KVM
   guest that was often the caller's own core (why was not verified; presumably the other vCPU, halted
   or preempted, was not counted as idle): the worker then
   waited in that core's queue while the caller ran the whole region alone, or shared the core with
   it. A 1024^3 GEMM at 2 threads ran at its 1-thread time for whole stretches (10.1 against 5.2 ms;
   2 of 4 joins on the caller's core). So while it sleeps, a worker may run anywhere it may run but
   on the caller's core: the wake-up lands elsewhere, and once awake it gets its whole mask back, so
   the load balancer still moves it freely (pinning it for good, TENSORKILN_THREAD_AFFINITY=close,
   fixed the GEMM too but, beside a busy process, kept the worker on the busy core and moved the
   busy process onto the caller's). Returns whether the mask changed (`allowed` then holds it). */
static int sleep_off_caller_core(cpu_set_t *allowed) {
    int caller = atomic_load_explicit(&caller_cpu, memory_order_relaxed);
    if (affinity_mode != 0 || caller < 0 || caller >= CPU_SETSIZE)
        return 0;
    if (pthread_getaffinity_np(pthread_self(), sizeof(*allowed), allowed) != 0 || CPU_COUNT(allowed) < 2
        || !CPU_ISSET(caller, allowed))
        return 0;
    cpu_set_t others = *allowed;
    CPU_CLR(caller, &others);
    return pthread_setaffinity_np(pthread_self(), sizeof(others), &others) == 0;
}

static void *worker_main(void *index) {
    pin_worker((int32_t)(intptr_t)index);
    in_region = 1;   /* a region a task of this worker starts runs on the worker alone */
    uint32_t seen = atomic_load(&region_number);
    for (;;) {
        uint32_t now;
        int rounds = 0;
        while ((now = atomic_load_explicit(&region_number, memory_order_acquire)) == seen) {
            if (++rounds < SPIN_ROUNDS) {
                cpu_pause();
                continue;
            }
            atomic_fetch_add(&sleepers, 1);
            cpu_set_t allowed;
            int moved = sleep_off_caller_core(&allowed);
            futex_wait(&region_number, seen);   /* returns at once if the number moved meanwhile */
            if (moved)
                pthread_setaffinity_np(pthread_self(), sizeof(allowed), &allowed);
            atomic_fetch_sub(&sleepers, 1);
            rounds = 0;
        }
        seen = now;
        uint64_t word = atomic_load_explicit(&region_word, memory_order_acquire);
        int joined = 0;
        while ((uint32_t)(word >> 32) == now && !(word & CLOSED) && (int64_t)(word & ACTIVE_MASK) < atomic_load_explicit(&region_team, memory_order_relaxed) - 1) {
            if (atomic_compare_exchange_weak_explicit(&region_word, &word, word + 1, memory_order_acq_rel,
                                                      memory_order_acquire)) {
                joined = 1;
                break;
            }
        }
        if (!joined)
            continue;
        team_size = atomic_load_explicit(&region_team, memory_order_relaxed);
        double cpu = thread_cpu_seconds();
        region_task(region_argument);
        /* the work this worker did, in CPU time: what the caller alone would have spent on it */
        atomic_fetch_add_explicit(&region_work_ns, (int64_t)((thread_cpu_seconds() - cpu) * 1e9),
                                  memory_order_relaxed);
        team_size = 1;
        atomic_fetch_sub_explicit(&region_word, 1, memory_order_release);
    }
    return NULL;
}

static void run_alone(tk_task task, void *argument) {
    int32_t saved = team_size;
    team_size = 1;
    task(argument);
    team_size = saved;
}

/* Backing off (state kept under the pool_busy flag): when regions take longer than the caller alone
   would have by more than WASTE_LIMIT of their time, on a moving average (workers that claimed work
   and were then descheduled: a loaded machine), the next regions run on the caller alone, then the
   pool is tried again. Measured beside one spinning process on 2 cores, 2 threads against 1: squeezenet
   1.03-1.09, shufflenet 0.97-1.06, resnet50 0.90-0.96 (libgomp: 1.65-1.70, 1.88-2.03, 0.99). */
#define WASTE_LIMIT 0.25
#define BACKOFF_REGIONS 200       /* doubled at each back-off that follows the last within 100 regions */
#define BACKOFF_MAX 12800
/* ... and never longer than this: 12800 regions of a 1.5 ms GEMM are 19 s on one thread, long after a burst of
   load (another BLAS's threads spinning for 0.1 s after their call) has passed. Measured, Zen 4, 2 vCPUs,
   gemm_sweep.py at 2 threads, where numpy's warm-up call came right before ours: 49x512x4608, 196x256x2304 and
   64x4096x1024 ran 200-205 of their ~214 regions alone after one back-off, 0.51-0.59x numpy. */
#define BACKOFF_MAX_SECONDS 0.25
static double backoff_end;     /* seconds_now() at which a back-off ends, whatever regions are left */
static double waste_average;   /* moving average of the fraction of a region's time lost */
static int32_t regions_alone, backoff_length = BACKOFF_REGIONS, regions_pooled;

/* ... and when the time lost over the last WINDOW_SECONDS of pooled regions is more than WASTE_LIMIT of
   it. The per-region average misses a worker that shares its core with a busy process and stalls one
   region in several for a whole time slice (shufflenet beside a spinning process: 8 ms at 2 threads
   against 2.8 at 1, no back-off, the average staying under the limit between the stalls); a window of
   many regions does not, while a single stall of a few ms on a quiet machine stays under its limit. */
#define WINDOW_SECONDS 0.02
static double window_seconds, window_lost;
static int32_t windows_since_backoff;
static int64_t count_pooled, count_alone, count_backoffs;   /* tk_pool_counts(): regions so far */

/* The caller's share of a core between the starts of its regions less than a millisecond apart (a
   run of kernels): below CALLER_SHARE_LIMIT on a moving average, the OS is giving the caller's core to
   someone else, the pool's own spinning worker among them (three busy threads on two cores beside one
   busy process), and each region's loss stays small while the run's serial parts slow down: shufflenet
   ran 1.4-1.8x its 1-thread time at 2 threads with no region-level back-off. */
#define CALLER_SHARE_LIMIT 0.8
static __thread double last_start_wall, last_start_cpu, share_average = 1.0;

/* The next backoff_length regions (for BACKOFF_MAX_SECONDS at most) run on the caller alone; the length doubles
   when the pool failed
   again within 100 regions or in the first window after the last back-off (state kept under the
   pool_busy flag). */
static void back_off(void) {
    regions_alone = backoff_length;
    backoff_end = seconds_now() + BACKOFF_MAX_SECONDS;
    count_backoffs++;
    int again = regions_pooled < 100 || windows_since_backoff == 0;
    backoff_length = again && backoff_length < BACKOFF_MAX ? 2 * backoff_length : BACKOFF_REGIONS;
    regions_pooled = 0;
    waste_average = 0.0;
    window_seconds = window_lost = 0.0;
    windows_since_backoff = 0;
}

static int caller_starved(void) {
    double wall = seconds_now(), cpu = thread_cpu_seconds();
    double elapsed = wall - last_start_wall, used = cpu - last_start_cpu;
    last_start_wall = wall;
    last_start_cpu = cpu;
    if (elapsed <= 0 || elapsed > 1e-3)   /* an idle gap between runs says nothing */
        return 0;
    share_average = 0.95 * share_average + 0.05 * (used < elapsed ? used / elapsed : 1.0);
    if (share_average >= CALLER_SHARE_LIMIT)
        return 0;
    share_average = 1.0;
    return 1;
}

void tk_parallel(tk_task task, void *argument, int32_t threads) {
    int32_t expected = 0;
    if (threads <= 1 || in_region || !atomic_compare_exchange_strong(&pool_busy, &expected, 1)) {
        run_alone(task, argument);
        return;
    }
    if (regions_alone > 0 && seconds_now() >= backoff_end)
        regions_alone = 0;
    if (regions_alone > 0) {
        regions_alone--;
        count_alone++;
        atomic_store(&pool_busy, 0);
        run_alone(task, argument);
        return;
    }
    if (caller_starved()) {
        back_off();
        atomic_store(&pool_busy, 0);
        run_alone(task, argument);
        return;
    }
    if (threads - 1 > MAX_WORKERS)
        threads = MAX_WORKERS + 1;
    while (workers_started < threads - 1) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, worker_main, (void *)(intptr_t)workers_started) != 0)
            break;
        pthread_detach(thread);
        workers_started++;
    }
    if (threads - 1 > workers_started)
        threads = workers_started + 1;
    if (threads <= 1) {
        atomic_store(&pool_busy, 0);
        run_alone(task, argument);
        return;
    }
    count_pooled++;
    uint32_t region = atomic_load(&region_number) + 1;
    region_task = task;
    region_argument = argument;
    atomic_store_explicit(&caller_cpu, sched_getcpu(), memory_order_relaxed);
    atomic_store_explicit(&region_team, threads, memory_order_relaxed);
    atomic_store_explicit(&region_work_ns, 0, memory_order_relaxed);
    atomic_store_explicit(&region_word, (uint64_t)region << 32, memory_order_release);
    atomic_store(&region_number, region);
    if (atomic_load(&sleepers) > 0)
        futex_wake_all(&region_number);
    double start = seconds_now();
    in_region = 1;
    team_size = threads;
    task(argument);
    team_size = 1;
    in_region = 0;
    double done = seconds_now();
    /* no work is left: close the region (a worker that has not joined never will) and wait for the
       workers that did, each finishing the last piece it claimed */
    atomic_fetch_or_explicit(&region_word, CLOSED, memory_order_acq_rel);
    for (int rounds = 0; atomic_load_explicit(&region_word, memory_order_acquire) & ACTIVE_MASK; rounds++) {
        if (rounds < WAIT_SPIN_ROUNDS)
            cpu_pause();
        else
            sched_yield();   /* the worker may be waiting for this core (a loaded machine) */
    }
    double end = seconds_now();
    if (end - start > 2e-5) {   /* shorter regions say little about the machine */
        /* waste: how much longer the region took than the caller alone would have, doing its own part
           and the workers' (their CPU time); a worker descheduled while it held a piece makes it positive */
        double work = 1e-9 * (double)atomic_load_explicit(&region_work_ns, memory_order_relaxed);
        double lost = (end - start) - ((done - start) + work);
        /* an average of per-region fractions: a time-weighted one (lost seconds over region seconds)
           backed off on a quiet machine too, on single stalls of a few ms (densenet121 at 2 threads:
           5 back-offs in 100 runs, against none) */
        if (lost < 0)
            lost = 0;
        waste_average = 0.9 * waste_average + 0.1 * lost / (end - start);
        window_seconds += end - start;
        window_lost += lost;
        int failed = waste_average > WASTE_LIMIT;
        if (window_seconds >= WINDOW_SECONDS) {
            failed |= window_lost > WASTE_LIMIT * window_seconds;
            window_seconds = window_lost = 0.0;
            windows_since_backoff += !failed;
        }
        if (failed)
            back_off();
        else
            regions_pooled++;
    }
    atomic_store_explicit(&pool_busy, 0, memory_order_release);
}

/* counts[0..2]: regions run on the team, regions run on the caller alone while backed off, back-offs
   (read by thread_pool.pool_counts(); written only under pool_busy, so a read between regions is exact) */
void tk_pool_counts(int64_t *counts) {
    counts[0] = count_pooled;
    counts[1] = count_alone;
    counts[2] = count_backoffs;
}

int32_t tk_team_size(void) {
    return team_size;
}

/* 0 none, 1 close (worker i on cpu i + 1), 2 spread; applies to workers started afterwards. */
void tk_pool_set_affinity(int32_t mode) {
    affinity_mode = mode;
}
