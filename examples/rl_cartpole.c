/* rl_cartpole.c - reinforcement learning over RPC: one agent learns to
   balance a pole on a cart from the episodes that N observers play.

   SMOKE: distrun -n 4 {} --smoke
   SMOKE-LINUX: distrun -n 4 --max-restarts 20 {} --chaos --smoke
   (Not in the Wine suite: Wine 8 at times keeps a killed process's
   sockets open, so the agent would wait for its episode until the call's
   timeout; see kill_self in tests/testutil.h.)

   Build and run (rank 0 is the "agent", ranks 1.. are "observer1"..):
      make build/distrun build/examples/rl_cartpole
      build/distrun -n 4 build/examples/rl_cartpole              # 3 observers
      build/distrun -n 4 build/examples/rl_cartpole --seed 7     # another run
      build/distrun -n 4 build/examples/rl_cartpole --smoke      # short, checked
      build/distrun -n 4 --max-restarts 50 build/examples/rl_cartpole --chaos
   Options: --seed S (1), --episodes E (most rounds before giving up, 3000),
   --log-interval K (10), --smoke (120 episodes, at least 40 rounds;
   checks that the policy got better), --chaos (below).  With 3 observers it is solved (running reward >= 475) in
   a few hundred rounds, typically a minute or less on two cores; the
   README lists the figures for seeds 1-5.

   --chaos: observers die and come back while the agent learns.  Every
   10th round the agent picks a live observer at random (from the seed)
   and, a few steps into that observer's episode, calls "die" on it
   without waiting for an answer; the observer ends its own process on the
   spot (SIGKILL; TerminateProcess on Windows): no cleanup, no goodbye, as
   a crash.  distrun --max-restarts starts a new process in its place with
   the same RANK, which joins the running job as a newcomer (DIST_JOINING=1;
   the job is dynamic: every worker sets cfg.dynamic, see DYNAMIC WORKERS in
   dist_rpc.h) under the dead one's name, "observer2" again, with a new
   rank (ranks are never reused).  Each round the agent plays with the
   observers alive then (dist_rpc_get_worker_infos) and waits for nobody
   (unless none is alive: then up to 30 s for one).  An episode whose
   run_episode fails with DIST_ERR_PEER_LOST is lost: the agent drops
   what that observer's calls left with it this round and learns from the
   episodes that finished (a round that lost them all learns nothing).
   Its records are kept by observer number and belong to one incarnation
   (rank) at a time: a replacement starts clean, and a late call from a
   dead one is turned away.  At the end the agent answers the "wait_stop"
   call each observer made when it came up (a newcomer that joins after
   the end gets its answer at once), waits until the observers it killed
   are back and every observer has left, and leaves last; each worker
   leaves alone (dist_rpc_shutdown(1) in a dynamic job).  It prints the
   rounds, the time, the kills, the replacements that joined and the
   episodes lost.  At most 40 kills (10 with --smoke): give distrun
   --max-restarts at least that, since a rank that fails once the restarts
   are used up stops the job.  --chaos --smoke kills every 5th round,
   plays 60 rounds (more, up to 200, until 3 replacements have played) and
   checks that at least 3 observers were killed, that at least 3
   replacements joined and played episodes, and that the policy got better
   as --smoke does.

   This is the reinforcement-learning half of PyTorch's tutorial "Getting
   Started with Distributed RPC Framework" (SyncOnPolicy), in C.  The
   words, for a C programmer new to RL:
   - An environment is a little simulated world.  CartPole: a cart on a
     track with a pole hinged on top; each step the player pushes the cart
     left or right, and gets a reward of 1 for every step the pole stays up
     (within 12 degrees of vertical, the cart within 2.4 m of the centre).
     An episode ends when the pole falls or after 500 steps (so 500 is a
     perfect score).  The code below is gym's CartPole-v1, constant for
     constant, rule for rule.
   - The policy is a small network: the 4 numbers of the state (cart
     position and speed, pole angle and angular speed) -> 128 units
     (dropout 0.6, ReLU) -> 2 scores -> softmax: the probabilities of
     pushing left and right.  The action is drawn from them.
   - REINFORCE learns from whole episodes: after an episode, each step's
     return (its reward plus the discounted rewards after it, gamma 0.99)
     says how good the step's action turned out; the loss
     sum(-log p(action) * normalised return) makes good actions likelier
     and bad ones less likely.  Adam, lr 0.01.
   - Observers and the agent.  Playing the environment is often the
     expensive part (a physics engine, a game), the policy small.  So N
     observer processes each own an environment and play episodes, while
     one agent holds the policy and learns.  Every step an observer asks
     the agent "which action?" (select_action) and tells it the reward
     (report_reward), by RPC.  The agent starts all observers' episodes
     with asynchronous calls (run_episode) and waits for them; the calls
     they make back, while the agent's own call to them is still running,
     are nested calls.  Then it learns from all the episodes at once
     (finish_episode) and starts the next round.
   - The running reward follows the worst observer's episode length:
     0.05 x (this round's) + 0.95 x (the running value).  475 is
     CartPole-v1's "solved" threshold, as in the tutorial.

   Differences from the tutorial, on purpose: each observer's environment
   gets its own seed (the tutorial seeds all alike, so they play nearly the
   same episode); each observer's returns are discounted within its own
   episode (the tutorial discounts across the concatenated episodes, so
   one observer's first rewards leak into another's last steps); the
   agent holds each observer's random stream (actions, dropout masks), so
   a run depends on the seed alone, never on which observer's call comes
   first.  No RRefs to observer objects: an observer is a process with a
   registered function, which is what the RRef gave the tutorial. */
#define DIST_IMPLEMENTATION
#include "dist.h"
#define DIST_RPC_IMPLEMENTATION
#include "dist_rpc.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>                      /* raise */
#include <stdatomic.h>                   /* --chaos: the agent's records, between its threads */

#define MSG dist_rpc_error_message()

static struct {
    uint64_t seed;
    int episodes, log_interval, smoke, chaos;
} opt = { 1, 3000, 10, 0, 0 };

static double now_s(void) { return (double)dist_time_ns() * 1e-9; }   /* dist.h's monotonic clock */

/* A small random number generator (splitmix64): the same numbers from the
   same seed on every machine. */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * (1.0 / 9007199254740992.0); } /* [0, 1) */

/* ========================= the environment ========================= */

/* gym's CartPole-v1 (classic_control/cartpole.py): Euler integration,
   20 ms steps, a start uniform in [-0.05, 0.05) for all four numbers,
   reward 1 per step including the last, at most 500 steps. */
typedef struct {
    double x, x_dot, theta, theta_dot;
    int steps;
    uint64_t rng;
} cartpole;

#define CP_GRAVITY 9.8
#define CP_MASSCART 1.0
#define CP_MASSPOLE 0.1
#define CP_TOTAL_MASS (CP_MASSPOLE + CP_MASSCART)
#define CP_LENGTH 0.5 /* half the pole's length */
#define CP_POLEMASS_LENGTH (CP_MASSPOLE * CP_LENGTH)
#define CP_FORCE_MAG 10.0
#define CP_TAU 0.02
#define CP_PI 3.14159265358979323846    /* (M_PI is POSIX, not C) */
#define CP_THETA_THRESHOLD (12 * 2 * CP_PI / 360)
#define CP_X_THRESHOLD 2.4
#define CP_MAX_STEPS 500

static void cartpole_reset(cartpole *e, float state[4]) {
    e->x = rng_uniform(&e->rng) * 0.1 - 0.05;
    e->x_dot = rng_uniform(&e->rng) * 0.1 - 0.05;
    e->theta = rng_uniform(&e->rng) * 0.1 - 0.05;
    e->theta_dot = rng_uniform(&e->rng) * 0.1 - 0.05;
    e->steps = 0;
    state[0] = (float)e->x; state[1] = (float)e->x_dot; state[2] = (float)e->theta; state[3] = (float)e->theta_dot;
}

/* One step pushing left (0) or right (1): the reward (1), the new state,
   and whether the episode is over (the pole fell, the cart left the
   track, or 500 steps: gym's terminated or truncated). */
static double cartpole_step(cartpole *e, int action, float state[4], int *done) {
    double force = action == 1 ? CP_FORCE_MAG : -CP_FORCE_MAG;
    double costheta = cos(e->theta), sintheta = sin(e->theta);
    double temp = (force + CP_POLEMASS_LENGTH * e->theta_dot * e->theta_dot * sintheta) / CP_TOTAL_MASS;
    double thetaacc = (CP_GRAVITY * sintheta - costheta * temp) / (CP_LENGTH * (4.0 / 3.0 - CP_MASSPOLE * costheta * costheta / CP_TOTAL_MASS));
    double xacc = temp - CP_POLEMASS_LENGTH * thetaacc * costheta / CP_TOTAL_MASS;
    e->x += CP_TAU * e->x_dot;
    e->x_dot += CP_TAU * xacc;
    e->theta += CP_TAU * e->theta_dot;
    e->theta_dot += CP_TAU * thetaacc;
    e->steps++;
    state[0] = (float)e->x; state[1] = (float)e->x_dot; state[2] = (float)e->theta; state[3] = (float)e->theta_dot;
    *done = e->x < -CP_X_THRESHOLD || e->x > CP_X_THRESHOLD || e->theta < -CP_THETA_THRESHOLD || e->theta > CP_THETA_THRESHOLD ||
            e->steps >= CP_MAX_STEPS;
    return 1.0;
}

/* ========================= an observer ========================= */

static cartpole env;                     /* this observer's environment */
static int my_id;                        /* this observer's number, 1.. (its name's) */

/* "run_episode" (called by the agent): plays one episode, asking the
   agent for every action and telling it every reward.  These calls go
   back to the agent while the agent's call to us is still running. */
static dist_value_t *h_run_episode(dist_rpc_call_t *call, const dist_value_t *args) {
    float state[4];
    int done = 0;
    (void)args;
    cartpole_reset(&env, state);
    while (!done) {
        dist_value_t *ret = NULL;
        int64_t action = 0;
        if (dist_rpc_sync("agent", "select_action", dist_value_pack("[it]", my_id, DIST_FLOAT32, 1, (const int64_t[]){ 4 }, state), &ret) != DIST_OK ||
            dist_value_unpack(ret, "I", &action) != DIST_OK) {
            dist_rpc_call_fail(call, "observer%d: select_action: %s", my_id, MSG);
            dist_value_free(ret);
            return NULL;
        }
        dist_value_free(ret);
        double reward = cartpole_step(&env, (int)action, state, &done);
        if (dist_rpc_sync("agent", "report_reward", dist_value_pack("[if]", my_id, reward), NULL) != DIST_OK) {
            dist_rpc_call_fail(call, "observer%d: report_reward: %s", my_id, MSG);
            return NULL;
        }
    }
    return NULL;
}

/* "die" (--chaos; the agent does not wait for an answer): the process
   ends on the spot, in the middle of its episode, as a crash would end it:
   no cleanup, no goodbye to the other workers. */
static dist_value_t *h_die(dist_rpc_call_t *call, const dist_value_t *args) {
    (void)call; (void)args;
    fflush(NULL);                        /* (only so that its last lines are not lost) */
#ifdef _WIN32
    TerminateProcess(GetCurrentProcess(), 137);   /* (<windows.h>: dist.h's implementation includes it) */
#else
    raise(SIGKILL);
#endif
    return NULL;
}

/* ========================= the agent ========================= */

#define HIDDEN 128
#define GAMMA 0.99
#define LR 1e-2f

/* What one observer (observer<ob>) left with the agent: its current
   episode, and which incarnation of it plays.  A restarted observer has
   the same name and number but a new rank: the record belongs to one rank
   at a time, and a call from any other (a dead incarnation's, still on
   its way) is turned away. */
typedef struct {
    dist_tensor_t *nll[CP_MAX_STEPS];    /* -log p(action) of each step, with its graph */
    float reward[CP_MAX_STEPS];
    int nsteps, nrewards;
    uint64_t rng;                        /* actions and dropout masks */
    int rank;                            /* the incarnation this record is for (-1: none yet) */
    int incarnation;                     /* 0: the process the job started with; k: its k-th replacement */
    int played;                          /* episodes this incarnation finished */
    int killed;                          /* --chaos: the rank the agent last killed (-1: none) */
    atomic_int open;                     /* 1 while its run_episode of this round runs: its calls are taken */
    atomic_int busy;                     /* its calls being served now */
    atomic_int newest;                   /* the highest rank seen with this name */
} episode;

static dist_tensor_t *param[4];          /* W1 [128,4], b1 [128], W2 [2,128], b2 [2] */
static dist_optim_t *adam;
static episode *eps_of;                  /* [1..observers] */
static int observers;
/* No lock, as in the tutorial.  The handler threads run several
   observers' calls at once, but each observer's calls come one at a time
   (its episode makes them in order, each waiting for the last) and touch
   only its own record, eps_of[ob].  The main thread opens the records
   when a round starts and closes them when it is over: a call is taken
   only while its record is open, from the rank the record is for, and
   counts itself `busy` meanwhile; closing waits until none is (a dead
   observer's last call may still be running when the agent hears of the
   death).  (Atomics: a call adds itself to busy, then looks at open; the
   main thread clears open, then looks at busy; one of the two sees the
   other.)  So the policy's parameters are only read during a round (the
   graphs keep references to them, which count atomically) and written
   by finish_episode, on the main thread, once every record is closed. */
static atomic_int replacements;          /* --chaos: newcomers seen (a new rank under an observer's name) */
static int chaos_victim;                 /* --chaos: the observer that dies this round (0: none) ... */
static int chaos_step;                   /* ... once its episode has taken this many steps */
static int chaos_sent;                   /* ... told (by the victim's select_action) */
static dist_future_t *die_fut;           /* the "die" call (never waited for) */

static uint64_t record_seed(int ob, int incarnation) {
    uint64_t s = opt.seed * 1000003u + (uint64_t)ob;
    if (incarnation > 0) { uint64_t t = s ^ ((uint64_t)incarnation << 32); s = rng_next(&t); }
    return s;
}

/* Drops what a record holds of an episode (closed records only). */
static void record_clear(episode *e) {
    for (int t = 0; t < e->nsteps; t++) dist_tensor_release(e->nll[t]);
    e->nsteps = e->nrewards = 0;
}

/* A rank seen under observer<ob>'s name: a newcomer when it is higher than
   any seen before (from any thread). */
static void note_rank(int ob, int rank) {
    episode *e = &eps_of[ob];
    int cur = atomic_load(&e->newest);
    while (rank > cur)
        if (atomic_compare_exchange_weak(&e->newest, &cur, rank)) {
            if (cur >= 0) atomic_fetch_add(&replacements, 1);
            break;
        }
}

static int make_policy(void) {
    /* torch's nn.Linear initialisation: uniform in +-1/sqrt(inputs) */
    const float k1 = 1.0f / sqrtf(4.0f), k2 = 1.0f / sqrtf((float)HIDDEN);
    param[0] = dist_tensor_uniform(2, (const int64_t[]){ HIDDEN, 4 }, -k1, k1, opt.seed * 4 + 0);
    param[1] = dist_tensor_uniform(1, (const int64_t[]){ HIDDEN }, -k1, k1, opt.seed * 4 + 1);
    param[2] = dist_tensor_uniform(2, (const int64_t[]){ 2, HIDDEN }, -k2, k2, opt.seed * 4 + 2);
    param[3] = dist_tensor_uniform(1, (const int64_t[]){ 2 }, -k2, k2, opt.seed * 4 + 3);
    for (int i = 0; i < 4; i++) {
        if (!param[i]) return -1;
        dist_tensor_set_requires_grad(param[i], 1);
    }
    adam = dist_optim_adam(4, param, LR, 0.9f, 0.999f, 1e-8f, 0.0f);
    return adam ? 0 : -1;
}

/* The record of observer `ob` when the caller is the incarnation playing
   it now (then busy: record_done after), or NULL with the call failed. */
static episode *record_take(dist_rpc_call_t *call, int ob, const char *fn) {
    int caller = dist_rpc_call_caller(call);
    episode *e;
    if (ob < 1 || ob > observers) {
        dist_rpc_call_fail(call, "%s: want [observer 1..%d, ...]", fn, observers);
        return NULL;
    }
    e = &eps_of[ob];
    atomic_fetch_add(&e->busy, 1);
    if (!atomic_load(&e->open)) {
        atomic_fetch_sub(&e->busy, 1);
        dist_rpc_call_fail(call, "%s: observer%d (rank %d) is not playing an episode now", fn, ob, caller);
        return NULL;
    }
    if (e->rank != caller) {
        int rank = e->rank;
        atomic_fetch_sub(&e->busy, 1);
        dist_rpc_call_fail(call, "%s: observer%d plays as rank %d this round, not rank %d (a dead incarnation's call?)", fn, ob, rank, caller);
        return NULL;
    }
    return e;
}
static void record_done(episode *e) { atomic_fetch_sub(&e->busy, 1); }

/* "select_action" [observer, state]: runs the policy on the state, draws
   an action from its probabilities and keeps -log p(action) (with the
   graph behind it) for the end of the episode. */
static dist_value_t *h_select_action(dist_rpc_call_t *call, const dist_value_t *args) {
    int ob = 0, nsteps;
    dist_tensor_view sv;
    episode *e;
    if (dist_value_unpack(args, "[it]", &ob, &sv) != DIST_OK || sv.dtype != DIST_FLOAT32 || sv.ndim != 1 || sv.shape[0] != 4) {
        dist_rpc_call_fail(call, "select_action: want [observer 1..%d, 4 float32s]", observers);
        return NULL;
    }
    if (!(e = record_take(call, ob, "select_action"))) return NULL;
    int64_t action = -1;
    if (e->nsteps < CP_MAX_STEPS) {
        dist_tensor_t *x = dist_tensor_new(2, (const int64_t[]){ 1, 4 }, (const float *)sv.data);
        dist_tensor_t *h = dist_tensor_linear(x, param[0], param[1]);
        dist_tensor_t *d = dist_tensor_dropout(h, 0.6f, rng_next(&e->rng), 1);
        dist_tensor_t *r = dist_tensor_relu(d);
        dist_tensor_t *scores = dist_tensor_linear(r, param[2], param[3]);
        dist_tensor_t *logp = dist_tensor_log_softmax(scores);
        if (logp) {
            double p_left = exp((double)dist_tensor_data(logp)[0]);
            action = rng_uniform(&e->rng) < p_left ? 0 : 1;
            e->nll[e->nsteps] = dist_tensor_nll_loss(logp, &action);
            if (e->nll[e->nsteps]) e->nsteps++;
            else action = -1;
        }
        dist_tensor_release(x); dist_tensor_release(h); dist_tensor_release(d);
        dist_tensor_release(r); dist_tensor_release(scores); dist_tensor_release(logp);
    }
    /* --chaos: this round's victim is told to die after its chaos_step-th
       action, in the middle of its episode (not waited for: no answer
       comes) */
    if (action >= 0 && ob == chaos_victim && !chaos_sent && e->nsteps >= chaos_step) {
        char name[32];
        snprintf(name, sizeof name, "observer%d", ob);
        if (dist_rpc_async(name, "die", NULL, &die_fut) == DIST_OK) {
            chaos_sent = 1;
            e->killed = e->rank;
        }
    }
    nsteps = e->nsteps;
    record_done(e);
    if (action < 0) {
        dist_rpc_call_fail(call, "select_action for observer%d: %s", ob, nsteps >= CP_MAX_STEPS ? "more than 500 steps in an episode" : MSG);
        return NULL;
    }
    return dist_value_int(action);
}

/* "report_reward" [observer, reward]. */
static dist_value_t *h_report_reward(dist_rpc_call_t *call, const dist_value_t *args) {
    int ob = 0, bad;
    double reward = 0;
    episode *e;
    if (dist_value_unpack(args, "[if]", &ob, &reward) != DIST_OK) {
        dist_rpc_call_fail(call, "report_reward: want [observer 1..%d, reward]", observers);
        return NULL;
    }
    if (!(e = record_take(call, ob, "report_reward"))) return NULL;
    bad = e->nrewards >= e->nsteps;      /* a reward for each action, after it */
    if (!bad) e->reward[e->nrewards++] = (float)reward;
    record_done(e);
    if (bad) dist_rpc_call_fail(call, "report_reward: observer%d reported more rewards than it took actions", ob);
    return NULL;
}

/* "wait_stop" [observer] (--chaos): an observer's main thread calls it
   once it is up, and the answer comes when the run is over (at once if it
   is: a newcomer that joins late learns it too).  The call is deferred:
   it holds no thread meanwhile.  It also tells the agent that a newcomer
   is up, even one that joins and leaves between two looks at the worker
   list. */
#define WAITERS 256                      /* more than observers + kills can make */
static atomic_int stopping;              /* the run is over */
static _Atomic(dist_rpc_call_t *) waiters[WAITERS];
static dist_value_t *h_wait_stop(dist_rpc_call_t *call, const dist_value_t *args) {
    int ob = 0, k;
    if (dist_value_unpack(args, "[i]", &ob) != DIST_OK || ob < 1 || ob > observers) {
        dist_rpc_call_fail(call, "wait_stop: want [observer 1..%d]", observers);
        return NULL;
    }
    note_rank(ob, dist_rpc_call_caller(call));
    if (atomic_load(&stopping)) return NULL;
    dist_rpc_call_defer(call);
    for (k = 0; k < WAITERS; k++) {
        dist_rpc_call_t *none = NULL;
        if (atomic_compare_exchange_strong(&waiters[k], &none, call)) break;
    }
    /* (stopping may have come meanwhile: then whoever takes the call back
       from its place answers it, this thread or agent_stop) */
    if (k == WAITERS || (atomic_load(&stopping) && atomic_exchange(&waiters[k], NULL)))
        dist_rpc_call_reply(call, NULL);
    return NULL;
}

/* The run is over: every waiting observer hears it. */
static void agent_stop(void) {
    atomic_store(&stopping, 1);
    for (int k = 0; k < WAITERS; k++) {
        dist_rpc_call_t *c = atomic_exchange(&waiters[k], NULL);
        if (c) dist_rpc_call_reply(c, NULL);   /* (a dead incarnation's: fails, and is freed) */
    }
}

/* A pause of the agent's main thread (--chaos: waiting for observers to
   come back or to leave).  Standard C has no sleep, but a future that
   stays pending is a timer: dist_future_wait(f, ms) returns after ms.  The
   agent makes one such at the start, a call to itself ("clock") that is
   deferred and answered at the end. */
static _Atomic(dist_rpc_call_t *) clock_call;
static dist_future_t *clock_fut;
static dist_value_t *h_clock(dist_rpc_call_t *call, const dist_value_t *args) {
    (void)args;
    dist_rpc_call_defer(call);
    atomic_store(&clock_call, call);
    return NULL;
}
static void pause_ms(int ms) {
    if (clock_fut) dist_future_wait(clock_fut, ms);
}
static dist_result clock_start(void) { return dist_rpc_async_timeout("agent", "clock", NULL, DIST_RPC_NO_TIMEOUT, &clock_fut); }
static void clock_stop(void) {
    dist_rpc_call_t *c = NULL;
    if (!clock_fut) return;
    for (int k = 0; k < 5000 && !(c = atomic_exchange(&clock_call, NULL)); k++) dist_future_wait(clock_fut, 1);
    if (c) dist_rpc_call_reply(c, NULL);
    dist_future_wait(clock_fut, 5000);
    dist_future_free(clock_fut);
    clock_fut = NULL;
}

/* After a round: REINFORCE on the episodes that finished (done[ob]), one
   Adam step.  Returns the shortest episode's reward (what the running
   reward follows), or -1 with a message. */
static double returns[CP_MAX_STEPS * 64];
static double finish_episode(const int *done) {
    int total = 0, min_len = CP_MAX_STEPS + 1, bad = 0;
    double mean = 0, var = 0, sd;
    /* each step's discounted return, within its own episode */
    for (int ob = 1; ob <= observers; ob++) {
        episode *e = &eps_of[ob];
        double R = 0;
        if (!done[ob]) continue;
        if (e->nrewards != e->nsteps) bad = 1;
        for (int t = e->nrewards - 1; t >= 0; t--) {
            R = e->reward[t] + GAMMA * R;
            returns[total + t] = R;
        }
        total += e->nrewards;
        if (e->nrewards < min_len) min_len = e->nrewards;
    }
    /* normalised: mean 0, deviation 1 (torch's std: n - 1), plus float32's epsilon */
    for (int i = 0; i < total; i++) mean += returns[i];
    mean /= total ? total : 1;
    for (int i = 0; i < total; i++) var += (returns[i] - mean) * (returns[i] - mean);
    sd = total > 1 ? sqrt(var / (total - 1)) : NAN;
    /* loss = sum over steps of -log p(action) x normalised return: each
       term's backward adds its part to the parameters' gradients */
    dist_optim_zero_grad(adam);
    total = 0;
    for (int ob = 1; ob <= observers; ob++) {
        episode *e = &eps_of[ob];
        if (!done[ob]) continue;
        for (int t = 0; t < e->nsteps; t++) {
            if (!bad) {
                dist_tensor_t *term = dist_tensor_scale(e->nll[t], (float)((returns[total + t] - mean) / (sd + 1.1920929e-07)));
                if (!term || dist_tensor_backward(term, NULL) != DIST_OK) bad = 1;
                dist_tensor_release(term);
            }
            dist_tensor_release(e->nll[t]);
        }
        total += e->nsteps;
        e->nsteps = e->nrewards = 0;
    }
    if (!bad && dist_optim_step(adam) != DIST_OK) bad = 1;
    return bad ? -1 : min_len;
}

#define CHAOS_EVERY 10                   /* --chaos: a kill every 10th round (5th with --smoke) */
#define CHAOS_MAX_KILLS 40               /* ... 40 in all (10 with --smoke): distrun --max-restarts must cover them */
#define CHAOS_SMOKE_ROUNDS 200           /* --chaos --smoke: rounds at most, waiting for 3 replacements to play */

/* The observers alive now (dist_rpc_get_worker_infos), by number: live[ob]
   is the rank of observer<ob>'s newest incarnation, or -1.  Returns how
   many there are.  (One the agent killed may be listed for a moment
   longer, until its listener's sweep notices: it is left out.)  Main
   thread, records closed. */
static int live_observers(int *live) {
    dist_worker_info info[256];
    int n = dist_rpc_get_worker_infos(info, 256), count = 0;
    for (int ob = 1; ob <= observers; ob++) live[ob] = -1;
    for (int k = 0; k < n && k < 256; k++) {
        int ob = 0;
        char tail;
        if (sscanf(info[k].name, "observer%d%c", &ob, &tail) != 1 || ob < 1 || ob > observers) continue;
        if (info[k].rank > live[ob]) live[ob] = info[k].rank;
    }
    for (int ob = 1; ob <= observers; ob++) {
        if (live[ob] < 0) continue;
        note_rank(ob, live[ob]);
        if (live[ob] == eps_of[ob].killed) live[ob] = -1;
        else count++;
    }
    return count;
}

/* --chaos, at the end: the run is over (the observers hear it); waits,
   within 30 s, until every observer it killed is back (distrun restarts
   it, and it must not be left waiting to join an empty job) and every
   observer has left. */
static void chaos_wrap_up(void) {
    int live[65], waiting_for = 0, nlive = 0;
    double t0 = now_s();
    agent_stop();
    while (now_s() - t0 < 30) {
        nlive = live_observers(live);
        waiting_for = 0;
        for (int ob = 1; ob <= observers; ob++)
            if (eps_of[ob].killed >= 0 && atomic_load(&eps_of[ob].newest) <= eps_of[ob].killed) waiting_for++;
        if (!nlive && !waiting_for) break;
        pause_ms(20);
        agent_stop();                    /* (a newcomer's call that came while stopping was set: answered) */
    }
    if (nlive || waiting_for)
        fprintf(stderr, "agent: after 30 s, %d observer(s) still in the job and %d killed one(s) not back; leaving anyway\n", nlive, waiting_for);
    else
        printf("agent: every observer has left (in %.0f ms)\n", (now_s() - t0) * 1000);
}

static int run_agent(void) {
    double running = 0, t0 = now_s(), last = 0;
    int solved = 0, i, episodes = 0, kills = 0, lost = 0, played = 0, learned = 0, failed = 0;
    int done[65], live[65], next_victim = 0, max_kills = opt.smoke ? 10 : CHAOS_MAX_KILLS, every = opt.smoke ? 5 : CHAOS_EVERY;
    dist_future_t *futs[65];
    uint64_t chaos_rng = opt.seed * 0x2545f4914f6cdd1dull + 99;
    /* smoke: 120 episodes in all, at least 40 rounds; with --chaos, 60
       rounds (lost episodes make learning noisier), more while fewer than
       3 replacements have played, up to 200 */
    int rounds = !opt.smoke ? opt.episodes : (120 + observers - 1) / observers > 40 ? (120 + observers - 1) / observers : 40;
    if (opt.smoke && opt.chaos) rounds = rounds > 60 ? rounds : 60;
    int most = opt.smoke && opt.chaos ? CHAOS_SMOKE_ROUNDS : rounds;
    double *shortest = (double *)calloc((size_t)most + 1, sizeof *shortest);   /* of each round that learned ... */
    int *learned_in = (int *)calloc((size_t)most + 1, sizeof *learned_in);       /* ... and its number */
    printf("agent: policy 4 -> %d (dropout 0.6, ReLU) -> 2, REINFORCE, Adam lr %g, gamma %g; %d observer%s playing CartPole-v1, seed %llu\n", HIDDEN,
           (double)LR, GAMMA, observers, observers == 1 ? "" : "s", (unsigned long long)opt.seed);
    if (opt.chaos) printf("agent: chaos: every %d rounds a random observer is killed in the middle of its episode (at most %d kills)\n", every, max_kills);
    fflush(stdout);
    if (!shortest || !learned_in) { free(shortest); free(learned_in); return 1; }
    if (opt.chaos && clock_start() != DIST_OK) { fprintf(stderr, "agent: clock: %s\n", MSG); free(shortest); free(learned_in); return 1; }
    for (i = 1; i <= most && !solved && (i <= rounds || played < 3); i++) {
        int nlive = live_observers(live), started = 0, finished = 0;
        if (!nlive) {
            /* --chaos: everyone is dead; wait for a replacement (30 s at most) */
            double w0 = now_s();
            while (!nlive && now_s() - w0 < 30) { pause_ms(20); nlive = live_observers(live); }
            if (!nlive) { fprintf(stderr, "agent: round %d: no observer alive, and none joined within 30 s\n", i); failed = 1; break; }
        }
        /* open the round: each live observer's record belongs to the
           incarnation alive now (a newcomer's starts clean) */
        for (int ob = 1; ob <= observers; ob++) {
            episode *e = &eps_of[ob];
            done[ob] = 0;
            futs[ob] = NULL;
            if (live[ob] < 0) continue;
            if (live[ob] != e->rank) {
                if (e->rank >= 0) {
                    e->incarnation++;
                    printf("agent: round %d: observer%d is back (rank %d, replacing rank %d)\n", i, ob, live[ob], e->rank);
                }
                record_clear(e);
                e->rng = record_seed(ob, e->incarnation);
                e->rank = live[ob];
                e->played = 0;
            }
        }
        /* --chaos: every `every` rounds a victim, at random; it dies in
           the middle of this round's episode, after a random number of
           steps up to half the last round's shortest episode (one whose
           episode ends sooner is killed in the next round's instead) */
        if (opt.chaos && i % every == 0 && kills < max_kills && !next_victim) {
            int pick = (int)(rng_next(&chaos_rng) % (uint64_t)nlive);
            for (int ob = 1; ob <= observers && !next_victim; ob++)
                if (live[ob] >= 0 && pick-- == 0) next_victim = ob;
        }
        chaos_victim = next_victim && live[next_victim] >= 0 ? next_victim : 0;
        chaos_sent = 0;
        if (chaos_victim) {
            int half = (int)last / 2;
            chaos_step = 1 + (int)(rng_next(&chaos_rng) % (uint64_t)(half > 1 ? half : 1));
        }
        for (int ob = 1; ob <= observers; ob++)
            if (live[ob] >= 0) atomic_store(&eps_of[ob].open, 1);
        /* start every live observer's episode, then wait for each */
        for (int ob = 1; ob <= observers && !failed; ob++) {
            char name[32];
            dist_result r;
            if (live[ob] < 0) continue;
            snprintf(name, sizeof name, "observer%d", ob);
            /* An episode is up to 1000 calls back to us, each within the
               default 60 s; the whole may take longer on a busy machine.
               (A dead observer fails it at once: PEER_LOST.) */
            if ((r = dist_rpc_async_timeout(name, "run_episode", NULL, 600 * 1000, &futs[ob])) != DIST_OK) {
                futs[ob] = NULL;
                if (opt.chaos && r == DIST_ERR_PEER_LOST) printf("agent: round %d: %s is gone before its episode: %s\n", i, name, MSG);
                else { fprintf(stderr, "agent: run_episode on %s: %s\n", name, MSG); failed = 1; }
                continue;
            }
            started++;
        }
        for (int ob = 1; ob <= observers; ob++) {
            dist_result res;
            if (!futs[ob]) continue;
            res = dist_future_wait(futs[ob], 0);
            if (res == DIST_OK) { done[ob] = 1; finished++; }
            else if (opt.chaos && res == DIST_ERR_PEER_LOST) {   /* it died mid-episode: that episode is lost */
                printf("agent: round %d: observer%d's episode is lost: %s\n", i, ob, dist_future_error(futs[ob]));
                lost++;
            } else if (!failed) {
                fprintf(stderr, "agent: round %d: %s\n", i, dist_future_error(futs[ob]));
                failed = 1;
            }
            dist_future_free(futs[ob]);
        }
        /* close the round: no record takes calls after this, and the
           calls still running (a dead observer's last) end first; a lost
           episode's steps are dropped */
        for (int ob = 1; ob <= observers; ob++) atomic_store(&eps_of[ob].open, 0);
        for (int ob = 1; ob <= observers; ob++)
            while (atomic_load(&eps_of[ob].busy) > 0) pause_ms(1);
        for (int ob = 1; ob <= observers; ob++) {
            episode *e = &eps_of[ob];
            if (live[ob] < 0) continue;
            if (!done[ob]) record_clear(e);
            else if (e->played++ == 0 && e->incarnation > 0) played++;
        }
        if (chaos_sent) {
            kills++;
            next_victim = 0;
            printf("agent: round %d: killed observer%d (rank %d) after step %d of its episode\n", i, chaos_victim, eps_of[chaos_victim].rank, chaos_step);
            dist_future_free(die_fut);           /* (pending is fine: never waited for) */
            die_fut = NULL;
        }
        if (failed) break;
        if (finished) {
            last = finish_episode(done);
            if (last < 0) { fprintf(stderr, "agent: learning from round %d: %s\n", i, MSG); failed = 1; break; }
            running = 0.05 * last + 0.95 * running;
            shortest[learned] = last;
            learned_in[learned++] = i;
            episodes += finished;
        }
        if (i % opt.log_interval == 0) {
            printf("agent: round %4d  shortest episode %3.0f steps  running reward %6.2f  (%.1f s)", i, last, running, now_s() - t0);
            if (opt.chaos) printf("  %d playing, %d kill%s, %d lost", started, kills, kills == 1 ? "" : "s", lost);
            printf("\n");
            fflush(stdout);
        }
        if (running >= 475) {
            printf("agent: solved after %d rounds (%d episodes): running reward %.2f >= 475, in %.1f s\n", i, episodes, running, now_s() - t0);
            solved = 1;
        }
    }
    double wall = now_s() - t0;
    int bad = failed;
    if (opt.chaos) {
        chaos_wrap_up();
        clock_stop();
        int joined = atomic_load(&replacements);
        printf("agent: chaos: %d rounds in %.1f s, %s (running reward %.2f); %d kill%s, %d replacement%s joined (%d played), %d episode%s "
               "lost\n", i - 1, wall, solved ? "solved" : "not solved", running, kills, kills == 1 ? "" : "s", joined, joined == 1 ? "" : "s",
               played, lost, lost == 1 ? "" : "s");
        if (!bad && opt.smoke && (kills < 3 || played < 3)) {
            fprintf(stderr, "agent: smoke check FAILED: %d kill%s and %d replacement%s that played episodes; want at least 3 of each\n", kills,
                    kills == 1 ? "" : "s", played, played == 1 ? "" : "s");
            bad = 1;
        }
    }
    if (!bad && opt.smoke) {
        /* the shortest episode of the last 10 rounds should be clearly
           longer than in the first 10 (an untrained policy drops the pole
           after ~10-40 steps); rounds that learned nothing (--chaos: every
           episode lost) do not count */
        double first10 = 0, last10 = 0;
        for (int k = 0; k < 10 && k < learned; k++) first10 += shortest[k] / 10;
        for (int k = learned - 10; k < learned; k++)
            if (k >= 0) last10 += shortest[k] / 10;
        if (learned < 20 || !(last10 >= 2 * first10)) {
            fprintf(stderr, "agent: smoke check FAILED: shortest episode %.1f steps on average over the first 10 rounds, %.1f over the last 10; want at least twice as long\n",
                    first10, last10);
            bad = 1;
        } else
            printf("agent: smoke check passed: the shortest episode grew from %.1f steps (rounds %d-%d) to %.1f (rounds %d-%d)\n", first10,
                   learned_in[0], learned_in[9], last10, learned_in[learned - 10], learned_in[learned - 1]);
    } else if (!bad && !solved)
        printf("agent: not solved in %d round%s (running reward %.2f); try another --seed\n", i - 1, i - 1 == 1 ? "" : "s", running);
    free(shortest);
    free(learned_in);
    return bad;
}

/* =============================== main =============================== */

static int parse_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--smoke")) { opt.smoke = 1; continue; }
        if (!strcmp(a, "--chaos")) { opt.chaos = 1; continue; }
        if (!v) goto usage;
        i++;
        if (!strcmp(a, "--seed")) { opt.seed = strtoull(v, &end, 10); if (*end) goto usage; }
        else if (!strcmp(a, "--episodes")) { opt.episodes = (int)strtol(v, &end, 10); if (*end || opt.episodes < 1) goto usage; }
        else if (!strcmp(a, "--log-interval")) { opt.log_interval = (int)strtol(v, &end, 10); if (*end || opt.log_interval < 1) goto usage; }
        else goto usage;
    }
    return 0;
usage:
    fprintf(stderr, "usage: distrun -n N %s [--smoke] [--seed S] [--episodes E] [--log-interval K]   (N >= 2: an agent and N-1 observers)\n"
                    "       distrun -n N --max-restarts 50 %s --chaos [...]   (observers are killed and come back)\n", argv[0], argv[0]);
    return -1;
}

/* How many times the launcher restarts a rank that fails: distrun
   --max-restarts says so in DIST_MAX_RESTARTS (torchrun in
   TORCHELASTIC_MAX_RESTARTS); 0 when neither is set. */
static long launcher_restarts(void) {
    const char *v = getenv("DIST_MAX_RESTARTS");
    if (!v || !*v) v = getenv("TORCHELASTIC_MAX_RESTARTS");
    return v && *v ? strtol(v, NULL, 10) : 0;
}

int main(int argc, char **argv) {
    if (parse_args(argc, argv)) return 2;
    /* --chaos kills observers and needs each brought back: without enough
       restarts the job would stop at the first kill, so say so now */
    if (opt.chaos && launcher_restarts() < (opt.smoke ? 10 : CHAOS_MAX_KILLS)) {
        /* (every rank says it: the launcher names whichever ends first) */
        fprintf(stderr, "rl_cartpole: --chaos kills up to %d observers and needs each restarted: run it under distrun --max-restarts %d "
                        "(or more), e.g. distrun -n 4 --max-restarts %d %s --chaos%s (this launch allows %ld)\n",
                opt.smoke ? 10 : CHAOS_MAX_KILLS, opt.smoke ? 10 : CHAOS_MAX_KILLS, opt.smoke ? 20 : 50, argv[0],
                opt.smoke ? " --smoke" : "", launcher_restarts());
        return 2;
    }
    dist_rpc_register("run_episode", h_run_episode);
    dist_rpc_register("die", h_die);
    dist_rpc_register("select_action", h_select_action);
    dist_rpc_register("report_reward", h_report_reward);
    dist_rpc_register("wait_stop", h_wait_stop);
    dist_rpc_register("clock", h_clock);
    /* The name must be chosen before joining: dist_env_rank reads the
       rank the launcher (distrun, mpirun, srun) gave this process, as
       dist_rpc_init will.  (A restarted observer has the same RANK: it
       comes back under its old name.) */
    int rank = 0, world = 1, bad = 0;
    char name[32];
    if (dist_env_rank(&rank, &world) != DIST_OK) { fprintf(stderr, "%s\nrun it with a launcher: distrun -n 4 %s\n", dist_error_message(NULL), argv[0]); return 2; }
    if (rank == 0) {
        /* the agent makes its policy and episode records before it joins,
           so no observer's call can come before they exist */
        observers = world - 1;
        if (observers < 1 || observers > 64) {
            fprintf(stderr, "agent: needs 1-64 observers: distrun -n 4 %s\n", argv[0]);
            return 2;
        }
        if (dist_restart_count() > 0) {
            fprintf(stderr, "agent: restarted, but the agent's policy lived in the process that died: it cannot come back\n");
            return 1;
        }
        snprintf(name, sizeof name, "agent");
        if (make_policy() || !(eps_of = (episode *)calloc((size_t)observers + 1, sizeof *eps_of))) {
            fprintf(stderr, "agent: making the policy: %s\n", MSG);
            return 1;
        }
        for (int ob = 1; ob <= observers; ob++) {
            eps_of[ob].rng = record_seed(ob, 0);
            eps_of[ob].rank = eps_of[ob].killed = -1;
            atomic_init(&eps_of[ob].open, 0);
            atomic_init(&eps_of[ob].busy, 0);
            atomic_init(&eps_of[ob].newest, -1);
        }
    } else {
        snprintf(name, sizeof name, "observer%d", rank);
        my_id = rank;
        env.rng = opt.seed * 7919u + (uint64_t)rank + (uint64_t)dist_restart_count() * 104729u;   /* a replacement plays other episodes */
    }
    dist_rpc_config cfg = { 0 };         /* rank, world size, rendezvous: from distrun's environment */
    cfg.name = name;
    cfg.dynamic = opt.chaos;             /* --chaos: workers die and join (every worker sets it alike) */
    if (dist_rpc_init(&cfg) != DIST_OK) { fprintf(stderr, "%s: dist_rpc_init: %s\n", name, MSG); return 1; }
    if (rank == 0) {
        bad = run_agent();
        if (opt.chaos) agent_stop();     /* (after a failure too: nobody is left waiting) */
    } else if (opt.chaos && dist_rpc_sync_timeout("agent", "wait_stop", dist_value_pack("[i]", my_id), DIST_RPC_NO_TIMEOUT, NULL) != DIST_OK) {
        /* (--chaos: the answer comes when the run is over; a failure says
           the agent is gone) */
        fprintf(stderr, "%s: waiting for the end of the run: %s\n", name, MSG);
        bad = 1;
    }
    /* Quiet: observers have nothing to do but answer: a graceful shutdown
       waits until every worker has called it, so they serve until the
       agent is done.  --chaos (a dynamic job): each worker leaves alone,
       the observers once the agent says stop, the agent last. */
    if (dist_rpc_shutdown(bad && !opt.chaos ? 0 : 1) != DIST_OK) { fprintf(stderr, "%s: shutdown: %s\n", name, MSG); bad = 1; }
    if (rank == 0) {
        dist_optim_free(adam);
        for (int i = 0; i < 4; i++) dist_tensor_release(param[i]);
        free(eps_of);
    }
    return bad;
}
