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
}

type Counters = Map<string, number>

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

/** Summed over every series of `name` carrying all of `labels` (workers label their series). */
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
  }
}
