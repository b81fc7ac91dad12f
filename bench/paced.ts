// An open-loop load at a constant rate (the half-saturation runs): requests leave on a schedule whatever the
// answers do, and each latency is measured from the moment its request was due, so a stall is counted for
// every request it delayed (no coordinated omission).
//
// Why not autocannon's overallRate: it gives each connection a quota per 1 s tick, and a connection spends
// its quota back to back at the start of the tick, then idles. "Half load" was a burst at full speed for
// half a second, and its latency was the saturated latency (measured: direct p50 1.1 ms, p99 7.7 ms at
// 1,000 req/s, a rate this upstream answers in 0.2 ms).
import { Pool } from 'undici'
import { loadRecorder, type Measured } from './load.ts'

export interface PacedOptions {
  url: string
  /** Requests per second, spread evenly. */
  rate: number
  durationS: number
  /** Connections the requests may use (kept alive); a request finding none free waits, and that counts. */
  connections: number
  /**
   * Requests due in the first seconds are sent but not recorded (wrk2 calibrates for 10 s): in 100 ms
   * buckets, the first second of the paced paid run, right after the saturated one, read 2-3× the median
   * latency of the rest.
   */
  warmupS?: number
  /** One header value per request (payment proofs); the run also ends when they are used up. */
  perRequest?: { header: string; values: string[] }
  expectStatus: number
}

/** How often the scheduler wakes to send what is due (Node timers are ~1 ms at best). */
const TICK_MS = 1

export async function paced(
  o: PacedOptions,
): Promise<Measured & { late_sends_pct: number; wrong_sample: Record<string, string> }> {
  const total = Math.min(Math.round(o.rate * o.durationS), o.perRequest?.values.length ?? Infinity)
  if (!(total > 0)) throw new Error('paced: nothing to send (rate, duration or values)')
  const url = new URL(o.url)
  const pool = new Pool(url.origin, { connections: o.connections, pipelining: 1 })
  const path = `${url.pathname}${url.search}`
  const intervalMs = 1000 / o.rate
  let sent = 0
  let settled = 0
  let unanswered = 0
  let late = 0
  /** The first answer's body of each unexpected status: what a 503 was (a throttle, a full queue) is in it. */
  const wrongSample: Record<string, string> = {}
  const recorder = loadRecorder(o.expectStatus)
  const startedMs = recorder.startedMs
  const recordFromMs = startedMs + (o.warmupS ?? 0) * 1000
  let allAnswered: () => void = () => {}
  const finished = new Promise<void>((resolve) => {
    allAnswered = resolve
  })

  const send = (dueMs: number) => {
    const headers: Record<string, string> = {}
    if (o.perRequest) headers[o.perRequest.header] = o.perRequest.values[sent]!
    sent++
    const latencyUs = () => (dueMs >= recordFromMs ? (performance.now() - dueMs) * 1000 : null)
    pool
      .request({ path, method: 'GET', headers })
      .then(async (res) => {
        const status = String(res.statusCode)
        if (res.statusCode !== o.expectStatus && !(status in wrongSample)) {
          wrongSample[status] = '' // taken now: answers of this status arriving meanwhile are dumped
          wrongSample[status] = (await res.body.text()).slice(0, 300)
        } else await res.body.dump()
        recorder.ended(res.statusCode, latencyUs())
      })
      .catch(() => {
        unanswered++
        recorder.ended(null, latencyUs())
      })
      .finally(() => {
        if (++settled === total) allAnswered()
      })
  }

  await new Promise<void>((resolve) => {
    const tick = () => {
      const now = performance.now()
      // Everything due by now leaves now, stamped with the time it was due.
      while (sent < total && startedMs + sent * intervalMs <= now) {
        const due = startedMs + sent * intervalMs
        if (now - due > TICK_MS * 2) late++
        send(due)
      }
      if (sent < total) setTimeout(tick, TICK_MS)
      else resolve()
    }
    tick()
  })
  await finished
  await pool.close()
  return {
    ...recorder.finish(settled, { errors: unanswered, timeouts: 0 }),
    // Sends that left more than two ticks after they were due (the load generator itself fell behind).
    late_sends_pct: Math.round((late / Math.max(1, total)) * 1000) / 10,
    wrong_sample: wrongSample,
  }
}
