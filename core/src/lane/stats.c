/* The lane's statistics: totals, time to first token, the prefill and
 * decode rates over a window of about a second of rounds, and the
 * acceptance of verify windows. */
#include "lane_impl.h"

/* A window closes once it spans this much time; an idle spell longer than
 * IDLE_NS starts a new one (and reads as no rate). */
#define WINDOW_NS 1000000000ull
#define IDLE_NS   2000000000ull

void loom__stats_init(lane_stats_state *st)
{
    st->win_t0 = loom_now_ns();
}

void loom__stats_first_token(loom_lane *lane, const stream *s, uint64_t now)
{
    lane_stats_state *st = &lane->stats;
    loom_mutex_lock(lane->mu);
    st->st.ttft_last_s = (double)(now - s->t_add) * 1e-9;
    st->ttft_sum += st->st.ttft_last_s;
    st->ttft_n++;
    loom_mutex_unlock(lane->mu);
}

void loom__stats_round(loom_lane *lane, int32_t n_prompt_rows,
                       int32_t n_generated, uint64_t t0, uint64_t t1)
{
    lane_stats_state *st = &lane->stats;
    loom_mutex_lock(lane->mu);
    st->st.rounds++;
    st->st.prompt_tokens += (uint64_t)n_prompt_rows;
    st->st.generated_tokens += (uint64_t)n_generated;
    st->st.forward_s += (double)(t1 - t0) * 1e-9;
    if (t0 - st->t_last_round > IDLE_NS) {
        /* after an idle spell the rate window starts with this round */
        st->win_t0 = t0;
        st->win_prefill = st->win_decode = 0;
    }
    st->win_prefill += (uint64_t)n_prompt_rows;
    st->win_decode += (uint64_t)n_generated;
    uint64_t now = loom_now_ns();
    st->t_last_round = now;
    if (now - st->win_t0 >= WINDOW_NS) {
        double dt = (double)(now - st->win_t0) * 1e-9;
        st->st.prefill_tok_s = (double)st->win_prefill / dt;
        st->st.decode_tok_s = (double)st->win_decode / dt;
        st->win_t0 = now;
        st->win_prefill = st->win_decode = 0;
    }
    loom_mutex_unlock(lane->mu);
}

void loom__stats_device(loom_lane *lane, double forward_s, double draw_s,
                        double between_s)
{
    loom_lane_stats *st = &lane->stats.st;
    loom_mutex_lock(lane->mu);
    st->device_forward_s += forward_s;
    st->device_draw_s += draw_s;
    st->device_between_s += between_s;
    st->device_rounds++;
    loom_mutex_unlock(lane->mu);
}

void loom__stats_window(loom_lane *lane, int32_t n_drafted, int32_t n_accepted)
{
    loom_lane_stats *st = &lane->stats.st;
    loom_mutex_lock(lane->mu);
    st->spec_windows++;
    st->spec_drafted += (uint64_t)n_drafted;
    st->spec_accepted += (uint64_t)n_accepted;
    if (n_accepted + 1 <= LOOM_MAX_WINDOW)
        st->spec_hist[n_accepted + 1]++;
    loom_mutex_unlock(lane->mu);
}

void loom_lane_get_stats(loom_lane *lane, loom_lane_stats *out)
{
    const lane_stats_state *st = &lane->stats;
    loom_mutex_lock(lane->mu);
    *out = st->st;
    out->active = lane->n_active - lane->n_ending_active;
    out->queued = lane->n_queued - lane->n_ending_queued;
    out->pool_total = lane->pool.n_total;
    out->pool_free = lane->pool.n_idle;
    out->ttft_avg_s = st->ttft_n ? st->ttft_sum / (double)st->ttft_n : 0;
    if (loom_now_ns() - st->t_last_round > IDLE_NS)
        out->prefill_tok_s = out->decode_tok_s = 0; /* idle: no rate */
    loom_mutex_unlock(lane->mu);
}
