// One load run with autocannon, every response's latency also recorded in an HDR histogram (µs precision;
// autocannon's own percentiles are whole milliseconds). Paid runs give each request its own proof.
import autocannon from 'autocannon'
import * as hdr from 'hdr-histogram-js'
import { machineBusy } from './cpu.ts'
import type { Inside, SettlementOutcome } from './scenarios/inside.ts'

export interface LoadOptions {
  url: string
  connections: number
  durationS: number
  method?: string
  headers?: Record<string, string>
  body?: string
  /** One header value per request (payment proofs); the run ends when they are used up or the time is. */
  perRequest?: { header: string; values: string[] }
  /** Headers of their own for each request (agent signatures, each used once), with or without perRequest. */
  headerSets?: Array<Record<string, string>>
  /** Request bodies taken in turn, one per request, for as long as the run lasts (instead of `body`). */
  bodies?: string[]
  /** The status a correct answer has; anything else counts as an error. */
  expectStatus: number
}

export interface Measured {
  rps: number
  p50_ms: number
  p90_ms: number
  p99_ms: number
  max_ms: number
  p99_us: number
  requests: number
  errors: number
  /** CPU the bench process (the load generator) used during the run, % of one core: ~100 means it was the limit. */
  loadgen_cpu_pct: number
  /** The whole machine's CPU busy during the load, % of all cores (bench/cpu.ts machineBusy). */
  machine_cpu_pct?: number
  /** paid-cold only: HTTP requests to the RPC node per paid call (target ≤ 1), and JSON-RPC calls. */
  rpc_per_proof?: number
  rpc_calls_per_proof?: number
  /** x402-batch (and mpp-charge, over x402): its throughput over nginx's and over x402 (exact)'s in the same run. */
  ratio_to_nginx?: number | null
  ratio_to_x402?: number | null
  /** mpp-charge only: its throughput over MPP's reference server (mppx/express) in the same run. */
  ratio_to_mpp_reference?: number | null
  /** mpp-charge over x402-after (both settled after the answer, in the leader's batches). */
  ratio_to_x402_after?: number | null
  /** The paid scenarios: where a call's time went inside the instance (bench/scenarios/inside.ts). */
  inside?: Inside
  /** x402 only: what became of its authorizations once the settlement backlog drained (target: none failed). */
  settlement?: SettlementOutcome
  /** x402-batch only: channels left unclaimed (0 once drained) and how long the claims took after the load. */
  claims?: { unclaimed_channels: number | null; drain_ms: number }
  /** Work to do once the load and its CPU measurement are over (not serialized). */
  afterLoad?: () => Promise<Partial<Measured>>
  /** Answers with another status than expected, by status; and requests with no answer (errors, timeouts). */
  wrong_status?: Record<string, number>
  no_answer?: { errors: number; timeouts: number }
}

/**
 * What every load run records, whichever generator sends: each answer's latency in an HDR histogram (µs),
 * the answers with another status than expected, the time of the last answer (req/s is total ÷ start → last
 * answer), the bench process's CPU and the machine's.
 */
export function loadRecorder(expectStatus: number) {
  const histogram = hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 120_000_000,
    numberOfSignificantValueDigits: 3,
  })
  const wrong: Record<string, number> = {}
  let wrongCount = 0
  const cpuStart = process.cpuUsage()
  const busy = machineBusy()
  const startedMs = performance.now()
  let lastAnswerMs = startedMs
  return {
    startedMs,
    /**
     * A request ended: its status (null: no answer at all, counted by the caller in finish's noAnswer) and
     * its latency, unless it is not to be recorded (a warm-up).
     */
    ended(status: number | null, latencyUs: number | null): void {
      lastAnswerMs = performance.now()
      if (latencyUs !== null) histogram.recordValue(Math.max(1, Math.round(latencyUs)))
      if (status !== null && status !== expectStatus) {
        wrongCount++
        wrong[status] = (wrong[status] ?? 0) + 1
      }
    },
    /** The figures of the run (and the histogram is freed). */
    finish(requests: number, noAnswer: { errors: number; timeouts: number }): Measured {
      const cpu = process.cpuUsage(cpuStart)
      const elapsedS = (lastAnswerMs - startedMs) / 1000
      const us = (p: number) => histogram.getValueAtPercentile(p)
      const unanswered = noAnswer.errors + noAnswer.timeouts
      const measured: Measured = {
        rps: Math.round(requests / elapsedS),
        p50_ms: round3(us(50) / 1000),
        p90_ms: round3(us(90) / 1000),
        p99_ms: round3(us(99) / 1000),
        max_ms: round3(histogram.maxValue / 1000),
        p99_us: us(99),
        requests,
        errors: unanswered + wrongCount,
        loadgen_cpu_pct: Math.round((cpu.user + cpu.system) / 10 / (elapsedS * 1000)),
        machine_cpu_pct: busy.stopPct(lastAnswerMs),
        ...(wrongCount > 0 ? { wrong_status: wrong } : {}),
        ...(unanswered > 0 ? { no_answer: noAnswer } : {}),
      }
      histogram.destroy()
      return measured
    },
  }
}

export async function load(o: LoadOptions): Promise<Measured> {
  let next = 0
  const values = o.perRequest?.values
  const sets = o.headerSets
  let nextSet = 0
  const bodies = o.bodies
  let nextBody = 0
  let done: (err: Error | null, r: autocannon.Result) => void = () => {}
  const finished = new Promise<autocannon.Result>((resolve, reject) => {
    done = (err, r) => (err ? reject(err) : resolve(r))
  })
  const recorder = loadRecorder(o.expectStatus)
  const instance = autocannon(
    {
      url: o.url,
      connections: o.connections,
      duration: o.durationS,
      method: (o.method ?? 'GET') as 'GET',
      headers: o.headers,
      body: o.body,
      ...(values || sets
        ? {
            amount: Math.min(values?.length ?? Infinity, sets?.length ?? Infinity),
            requests: [
              {
                setupRequest: (req: any) => ({
                  ...req,
                  headers: {
                    ...req.headers,
                    ...(sets ? sets[nextSet++ % sets.length] : {}),
                    ...(values ? { [o.perRequest!.header]: values[next++ % values.length]! } : {}),
                  },
                }),
              },
            ],
          }
        : bodies
          ? {
              requests: [
                { setupRequest: (req: any) => ({ ...req, body: bodies[nextBody++ % bodies.length]! }) },
              ],
            }
          : {}),
    },
    (err, r) => done(err, r),
  )
  instance.on('response', (_client: unknown, status: number, _bytes: number, ms: number) =>
    recorder.ended(status, ms * 1000),
  )
  const r = await finished
  // total / (start → last answer): neither the mean of per-second samples nor autocannon's start/finish.
  // A run bounded by a number of requests (paid runs: one proof each) stops at autocannon's next 1 s tick
  // after its last answer, so its finish time rounded every such run up to whole seconds (6,000 proofs
  // answered in 2.2 s read as 6,000 / 3.0 s).
  return recorder.finish(r.requests.total, { errors: r.errors, timeouts: r.timeouts })
}

/**
 * One run where each connection sends its own sequence of header values, in order (x402 batch-settlement:
 * a channel's cumulative vouchers). autocannon shares one request template between the connections of a run,
 * so each sequence gets its own one-connection autocannon instance; all run at once in this process and
 * their answers go into one histogram.
 */
export async function loadSequences(o: {
  url: string
  durationS: number
  header: string
  sequences: string[][]
  expectStatus: number
}): Promise<Measured> {
  const recorder = loadRecorder(o.expectStatus)
  const results = await Promise.all(
    o.sequences.map((values) => {
      let next = 0
      return new Promise<autocannon.Result>((resolve, reject) => {
        const instance = autocannon(
          {
            url: o.url,
            connections: 1,
            duration: o.durationS,
            amount: values.length,
            requests: [
              {
                setupRequest: (req: any) => ({
                  ...req,
                  headers: { ...req.headers, [o.header]: values[next++]! },
                }),
              },
            ],
          },
          (err, r) => (err ? reject(err) : resolve(r)),
        )
        instance.on('response', (_client: unknown, status: number, _bytes: number, ms: number) =>
          recorder.ended(status, ms * 1000),
        )
      })
    }),
  )
  // Start → last answer, as in load(): autocannon's finish waits for its next 1 s tick.
  const sum = (f: (r: autocannon.Result) => number) => results.reduce((n, r) => n + f(r), 0)
  return recorder.finish(
    sum((r) => r.requests.total),
    {
      errors: sum((r) => r.errors),
      timeouts: sum((r) => r.timeouts),
    },
  )
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000
}
