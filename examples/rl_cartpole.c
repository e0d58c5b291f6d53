/* rl_cartpole.c - reinforcement learning over RPC: one agent learns to
   balance a pole on a cart from the episodes that N observers play.

   SMOKE: distrun -n 4 {} --smoke

   Build and run (rank 0 is the "agent", ranks 1.. are "observer1"..):
      make build/distrun build/examples/rl_cartpole
      build/distrun -n 4 build/examples/rl_cartpole              # 3 observers
      build/distrun -n 4 build/examples/rl_cartpole --seed 7     # another run
      build/distrun -n 4 build/examples/rl_cartpole --smoke      # short, checked
   Options: --seed S (1), --episodes E (most rounds before giving up, 3000),
   --log-interval K (10), --smoke (120 episodes, at least 40 rounds;
   checks that the policy got better).  With 3 observers it is solved (running reward >= 475) in
   a few hundred rounds, typically a minute or less on two cores; the
   README lists the figures for seeds 1-5.

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

#define MSG dist_rpc_error_message()

static struct {
    uint64_t seed;
    int episodes, log_interval, smoke;
} opt = { 1, 3000, 10, 0 };

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
static int my_id;                        /* this observer's number, 1.. */

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

/* ========================= the agent ========================= */

#define HIDDEN 128
#define GAMMA 0.99
#define LR 1e-2f

/* What one observer's current episode left with the agent. */
typedef struct {
    dist_tensor_t *nll[CP_MAX_STEPS];    /* -log p(action) of each step, with its graph */
    float reward[CP_MAX_STEPS];
    int nsteps, nrewards;
    uint64_t rng;                        /* actions and dropout masks */
} episode;

static dist_tensor_t *param[4];          /* W1 [128,4], b1 [128], W2 [2,128], b2 [2] */
static dist_optim_t *adam;
static episode *eps_of;                  /* [1..observers] */
static int observers;
/* No lock, as in the tutorial.  The handler threads run several
   observers' calls at once, but each observer's calls come one at a time
   (its episode makes them in order, each waiting for the last) and touch
   only its own record, eps_of[ob] (the handlers check that observer ob is
   rank ob); the policy's parameters are only read during a round (the
   graphs keep references to them, which count atomically) and written by
   finish_episode, on the main thread, once every observer's episode is
   over (dist_future_wait_all). */

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

/* "select_action" [observer, state]: runs the policy on the state, draws
   an action from its probabilities and keeps -log p(action) (with the
   graph behind it) for the end of the episode. */
static dist_value_t *h_select_action(dist_rpc_call_t *call, const dist_value_t *args) {
    int ob = 0;
    dist_tensor_view sv;
    if (dist_value_unpack(args, "[it]", &ob, &sv) != DIST_OK || ob < 1 || ob > observers || ob != dist_rpc_call_caller(call) ||
        sv.dtype != DIST_FLOAT32 || sv.ndim != 1 || sv.shape[0] != 4) {
        dist_rpc_call_fail(call, "select_action: want [observer 1..%d (the caller's rank), 4 float32s]", observers);
        return NULL;
    }
    episode *e = &eps_of[ob];
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
    if (action < 0) {
        dist_rpc_call_fail(call, "select_action for observer%d: %s", ob, e->nsteps >= CP_MAX_STEPS ? "more than 500 steps in an episode" : MSG);
        return NULL;
    }
    return dist_value_int(action);
}

/* "report_reward" [observer, reward]. */
static dist_value_t *h_report_reward(dist_rpc_call_t *call, const dist_value_t *args) {
    int ob = 0, bad;
    double reward = 0;
    if (dist_value_unpack(args, "[if]", &ob, &reward) != DIST_OK || ob < 1 || ob > observers || ob != dist_rpc_call_caller(call)) {
        dist_rpc_call_fail(call, "report_reward: want [observer 1..%d (the caller's rank), reward]", observers);
        return NULL;
    }
    episode *e = &eps_of[ob];
    bad = e->nrewards >= e->nsteps;      /* a reward for each action, after it */
    if (!bad) e->reward[e->nrewards++] = (float)reward;
    if (bad) dist_rpc_call_fail(call, "report_reward: observer%d reported more rewards than it took actions", ob);
    return NULL;
}

/* After a round: REINFORCE on every observer's episode, one Adam step.
   Returns the shortest episode's reward (what the running reward follows),
   or -1 with a message. */
static double returns[CP_MAX_STEPS * 64];
static double finish_episode(void) {
    int total = 0, min_len = CP_MAX_STEPS + 1, bad = 0;
    double mean = 0, var = 0, sd;
    /* each step's discounted return, within its own episode */
    for (int ob = 1; ob <= observers; ob++) {
        episode *e = &eps_of[ob];
        double R = 0;
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

static int run_agent(void) {
    double running = 0, t0 = now_s(), first10 = 0, last10 = 0;
    int solved = 0, i;
    /* smoke: 120 episodes in all, at least 40 rounds */
    int rounds = !opt.smoke ? opt.episodes : (120 + observers - 1) / observers > 40 ? (120 + observers - 1) / observers : 40;
    dist_future_t **futs = (dist_future_t **)calloc((size_t)observers, sizeof *futs);
    printf("agent: policy 4 -> %d (dropout 0.6, ReLU) -> 2, REINFORCE, Adam lr %g, gamma %g; %d observer%s playing CartPole-v1, seed %llu\n", HIDDEN,
           (double)LR, GAMMA, observers, observers == 1 ? "" : "s", (unsigned long long)opt.seed);
    fflush(stdout);
    if (!futs) return 1;
    for (i = 1; i <= rounds && !solved; i++) {
        /* start every observer's episode, then wait for all of them */
        for (int ob = 1; ob <= observers; ob++) {
            char name[32];
            snprintf(name, sizeof name, "observer%d", ob);
            /* An episode is up to 1000 calls back to us, each within the
               default 60 s; the whole may take longer on a busy machine.
               (A dead observer fails it at once: PEER_LOST.) */
            if (dist_rpc_async_timeout(name, "run_episode", NULL, 600 * 1000, &futs[ob - 1]) != DIST_OK) {
                fprintf(stderr, "agent: run_episode on %s: %s\n", name, MSG);
                for (int k = 0; k < ob - 1; k++) { dist_future_wait(futs[k], 0); dist_future_free(futs[k]); }
                free(futs);
                return 1;
            }
        }
        dist_result res = dist_future_wait_all(observers, futs, 0);
        for (int ob = 0; ob < observers; ob++) dist_future_free(futs[ob]);
        if (res != DIST_OK) { fprintf(stderr, "agent: round %d: %s\n", i, MSG); free(futs); return 1; }
        double last = finish_episode();
        if (last < 0) { fprintf(stderr, "agent: learning from round %d: %s\n", i, MSG); free(futs); return 1; }
        running = 0.05 * last + 0.95 * running;
        if (i <= 10) first10 += last / 10;
        if (i > rounds - 10) last10 += last / 10;
        if (i % opt.log_interval == 0) {
            printf("agent: round %4d  shortest episode %3.0f steps  running reward %6.2f  (%.1f s)\n", i, last, running, now_s() - t0);
            fflush(stdout);
        }
        if (running >= 475) {
            printf("agent: solved after %d rounds (%d episodes): running reward %.2f >= 475, in %.1f s\n", i, i * observers, running, now_s() - t0);
            solved = 1;
        }
    }
    free(futs);
    if (opt.smoke) {
        /* the shortest episode of the last 10 rounds should be clearly
           longer than in the first 10 (an untrained policy drops the pole
           after ~10-40 steps) */
        if (!(last10 >= 2 * first10)) {
            fprintf(stderr, "agent: smoke check FAILED: shortest episode %.1f steps on average over the first 10 rounds, %.1f over the last 10; want at least twice as long\n",
                    first10, last10);
            return 1;
        }
        printf("agent: smoke check passed: the shortest episode grew from %.1f steps (rounds 1-10) to %.1f (rounds %d-%d)\n", first10, last10, rounds - 9,
               rounds);
    } else if (!solved) {
        printf("agent: not solved in %d rounds (running reward %.2f); try another --seed\n", rounds, running);
    }
    return 0;
}

/* =============================== main =============================== */

static int parse_args(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--smoke")) { opt.smoke = 1; continue; }
        if (!v) goto usage;
        i++;
        if (!strcmp(a, "--seed")) { opt.seed = strtoull(v, &end, 10); if (*end) goto usage; }
        else if (!strcmp(a, "--episodes")) { opt.episodes = (int)strtol(v, &end, 10); if (*end || opt.episodes < 1) goto usage; }
        else if (!strcmp(a, "--log-interval")) { opt.log_interval = (int)strtol(v, &end, 10); if (*end || opt.log_interval < 1) goto usage; }
        else goto usage;
    }
    return 0;
usage:
    fprintf(stderr, "usage: distrun -n N %s [--smoke] [--seed S] [--episodes E] [--log-interval K]   (N >= 2: an agent and N-1 observers)\n", argv[0]);
    return -1;
}

int main(int argc, char **argv) {
    if (parse_args(argc, argv)) return 2;
    dist_rpc_register("run_episode", h_run_episode);
    dist_rpc_register("select_action", h_select_action);
    dist_rpc_register("report_reward", h_report_reward);
    /* The name must be chosen before joining: dist_env_rank reads the
       rank the launcher (distrun, mpirun, srun) gave this process, as
       dist_rpc_init will. */
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
        snprintf(name, sizeof name, "agent");
        if (make_policy() || !(eps_of = (episode *)calloc((size_t)observers + 1, sizeof *eps_of))) {
            fprintf(stderr, "agent: making the policy: %s\n", MSG);
            return 1;
        }
        for (int ob = 1; ob <= observers; ob++) eps_of[ob].rng = opt.seed * 1000003u + (uint64_t)ob;
    } else {
        snprintf(name, sizeof name, "observer%d", rank);
        my_id = rank;
        env.rng = opt.seed * 7919u + (uint64_t)rank;
    }
    dist_rpc_config cfg = { 0 };         /* rank, world size, rendezvous: from distrun's environment */
    cfg.name = name;
    if (dist_rpc_init(&cfg) != DIST_OK) { fprintf(stderr, "%s: dist_rpc_init: %s\n", name, MSG); return 1; }
    if (rank == 0) bad = run_agent();
    /* Observers have nothing to do but answer: a graceful shutdown waits
       until every worker has called it, so they serve until the agent is
       done. */
    if (dist_rpc_shutdown(bad ? 0 : 1) != DIST_OK) { fprintf(stderr, "%s: shutdown: %s\n", name, MSG); bad = 1; }
    if (rank == 0) {
        dist_optim_free(adam);
        for (int i = 0; i < 4; i++) dist_tensor_release(param[i]);
        free(eps_of);
    }
    return bad;
}
