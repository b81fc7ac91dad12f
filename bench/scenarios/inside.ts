// Where a paid call's time goes inside the instance, from its own /metrics read before and after a run:
// how many claims and captures shared each commit, and the mean time of the request and of its upstream leg.
// The difference of the two means is the time spent in tollgate before the upstream (mostly the claim).

export interface Inside {
  /** Claim/capture statements (one commit each) in the run, and the mean claims and captures per commit. */
  books_writes: number
  claims_per_write: number
  captures_per_write: number
  /** Mean time from request to end of response (metered, 2xx), as the instance measured it. */
  request_mean_ms: number
  /** Mean time until the upstream answered with headers. */
  upstream_head_mean_ms: number
  /** Mean time of a verification's chain look-up (cold transactions, x402 authorizations), and how many. */
  rpc_lookups: number
  rpc_mean_ms: number
  /** JSON-RPC calls sent to the node in the run (each call of a batch counted): eth_call, all methods. */
  rpc_eth_calls: number
  rpc_calls: number
  /** HTTP requests to the node that carried them (a batch is one). */
  rpc_requests: number
  /** Mean time of one claim/capture statement, and the share of them that took over 10 ms. */
  write_mean_ms: number
  writes_over_10ms_pct: number
  /** Garbage collection in the run: total pause time and the major collections. */
  gc_ms: number
  gc_major: number
  /** The longest event-loop delay seen in the run (prom-client resets it at each scrape). */
  event_loop_max_ms: number
}

export type Counters = Map<string, number>

export async function readCounters(adminPort: number): Promise<Counters> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text()
  const out: Counters = new Map()
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue
    const space = line.lastIndexOf(' ')
    if (space > 0) out.set(line.slice(0, space), Number(line.slice(space + 1)))
  }
  return out
}

/** Summed over every series of `name` carrying all of `labels` (with workers the parent already sums them). */
function total(counters: Counters, name: string, labels: string[]): number {
  let sum = 0
  for (const [key, value] of counters) {
    const brace = key.indexOf('{')
    if ((brace < 0 ? key : key.slice(0, brace)) !== name) continue
    if (labels.every((l) => key.includes(l))) sum += value
  }
  return sum
}

export function inside(before: Counters, after: Counters): Inside {
  const d = (name: string, ...labels: string[]) => total(after, name, labels) - total(before, name, labels)
  const mean = (sum: number, count: number, scale = 1) =>
    count > 0 ? Math.round((sum / count) * scale * 1000) / 1000 : 0
  const writes = d('tollgate_books_writes_total')
  const writeCount = d('tollgate_books_write_duration_seconds_count')
  return {
    books_writes: writes,
    claims_per_write: mean(d('tollgate_claims_batch_size_sum'), writes),
    captures_per_write: mean(d('tollgate_captures_batch_size_sum'), writes),
    request_mean_ms: mean(
      d('tollgate_http_request_duration_seconds_sum', 'route="metered"', 'status_class="2xx"'),
      d('tollgate_http_request_duration_seconds_count', 'route="metered"', 'status_class="2xx"'),
      1000,
    ),
    upstream_head_mean_ms: mean(
      d('tollgate_upstream_duration_seconds_sum', 'status_class="2xx"'),
      d('tollgate_upstream_duration_seconds_count', 'status_class="2xx"'),
      1000,
    ),
    rpc_lookups: d('tollgate_chain_rpc_duration_seconds_count'),
    rpc_mean_ms: mean(
      d('tollgate_chain_rpc_duration_seconds_sum'),
      d('tollgate_chain_rpc_duration_seconds_count'),
      1000,
    ),
    rpc_eth_calls: d('tollgate_rpc_calls_total', 'method="eth_call"'),
    rpc_calls: d('tollgate_rpc_calls_total'),
    rpc_requests: d('tollgate_rpc_requests_total'),
    write_mean_ms: mean(d('tollgate_books_write_duration_seconds_sum'), writeCount, 1000),
    writes_over_10ms_pct: mean(
      writeCount - d('tollgate_books_write_duration_seconds_bucket', 'le="0.01"'),
      writeCount,
      100,
    ),
    gc_ms: Math.round(d('tollgate_nodejs_gc_duration_seconds_sum') * 1000),
    gc_major: d('tollgate_nodejs_gc_duration_seconds_count', 'kind="major"'),
    event_loop_max_ms: Math.round(total(after, 'tollgate_nodejs_eventloop_lag_max_seconds', []) * 1000),
  }
}

export interface SettlementOutcome {
  /** Authorizations settled and failed (reverted or expired) since the run began, once the backlog drained. */
  settled: number
  failed: number
  /** From the end of the load until no captured authorization was left unsettled. */
  drain_ms: number
}

/**
 * Waits until the instance has no captured x402 authorization left to settle (its scrape-time backlog gauge)
 * and, given `expected`, until that many settled or failed since `before` (a capture sent but not yet mined
 * has left the backlog: the settle-before-answer path's are counted when marked), at most `timeoutMs`; then
 * counts the settlements since `before`.
 */
export async function settlementOutcome(
  adminPort: number,
  before: Counters,
  timeoutMs = 60_000,
  expected = 0,
): Promise<SettlementOutcome> {
  const started = performance.now()
  const counted = (c: Counters) =>
    ['settled', 'reverted', 'expired'].reduce(
      (n, o) =>
        n +
        total(c, 'tollgate_x402_settlements_total', [`outcome="${o}"`]) -
        total(before, 'tollgate_x402_settlements_total', [`outcome="${o}"`]),
      0,
    )
  let now = await readCounters(adminPort)
  while (total(now, 'tollgate_x402_settlement_backlog_count', []) > 0 || counted(now) < expected) {
    if (performance.now() - started > timeoutMs) break
    // A polling period, not a wait for a condition that could be awaited.
    await new Promise((r) => setTimeout(r, 200))
    now = await readCounters(adminPort)
  }
  const d = (outcome: string) =>
    total(now, 'tollgate_x402_settlements_total', [`outcome="${outcome}"`]) -
    total(before, 'tollgate_x402_settlements_total', [`outcome="${outcome}"`])
  return {
    settled: d('settled'),
    failed: d('reverted') + d('expired'),
    drain_ms: Math.round(performance.now() - started),
  }
}
