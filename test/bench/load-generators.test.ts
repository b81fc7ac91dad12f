// The bench's two load generators, bounded (about 3 s), against a real node:http server on 127.0.0.1: the
// figures the README's claims rest on must mean what they say.
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { availableParallelism, loadavg } from 'node:os'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { machineBusy } from '../../bench/cpu.ts'
import { load } from '../../bench/load.ts'
import { paced } from '../../bench/paced.ts'
import { targetChecks } from '../../bench/report.ts'

let server: Server
let base = ''
let warmStart: number | null = null
/** Arrival times (ms) and x-payment values of the requests the server saw. */
const seen: Array<{ at: number; proof: string | undefined }> = []

beforeAll(async () => {
  server = createServer((req, res) => {
    seen.push({ at: performance.now(), proof: req.headers['x-payment'] as string | undefined })
    // One slow answer in the paced run: its delay must show in the latency of the requests behind it.
    // /warm answers slowly for its first 0.7 s: a warm-up that must not show.
    warmStart ??= req.url === '/warm' ? performance.now() : null
    const delay =
      req.url === '/slow' && seen.length === 150
        ? 200
        : req.url === '/warm' && warmStart !== null && performance.now() - warmStart < 700
          ? 150
          : 0
    setTimeout(() => res.end('ok'), delay)
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})

afterAll(() => new Promise<void>((r) => server.close(() => r())))

/**
 * The timing figures (evenness, warm-up, req/s, a spinning core) hold on a machine this process mostly has
 * to itself, as in CI and a bench run. With other suites keeping every core queued (load average past three
 * runnable processes per core) this process is descheduled for whole windows, and they say nothing about
 * the generators: those checks are left out and said so; what was sent and counted is checked regardless.
 */
function timingMeaningful(): boolean {
  const ok = loadavg()[0]! <= availableParallelism() * 3
  if (!ok) console.warn(`load average ${loadavg()[0]!.toFixed(1)}: timing checks left out`)
  return ok
}

describe('paced (open loop, the half-load runs)', () => {
  it('sends at the asked rate, evenly, each proof once, and counts a stall for every request it delayed', async () => {
    seen.length = 0
    const proofs = Array.from({ length: 400 }, (_, i) => `proof-${i}`)
    const m = await paced({
      url: `${base}/slow`,
      rate: 200,
      durationS: 2,
      connections: 1,
      perRequest: { header: 'x-payment', values: proofs },
      expectStatus: 200,
    })
    expect(m.requests).toBe(400)
    expect(m.errors).toBe(0)
    expect(new Set(seen.map((s) => s.proof)).size).toBe(400)
    // Evenly: no 100 ms window (after the first) gets far more than its 20 requests (autocannon's
    // overallRate sent a whole second's quota at once).
    const start = seen[0]!.at
    const windows = new Map<number, number>()
    for (const s of seen) {
      const w = Math.floor((s.at - start) / 100)
      windows.set(w, (windows.get(w) ?? 0) + 1)
    }
    // The 200 ms stall on one connection queues ~40 requests that then leave at once; elsewhere ~20. A
    // machine loaded by other suites stalls this process too, so a few more windows may catch up; a
    // second's quota sent at once (the old bug) puts ~200 in one window.
    const counts = [...windows.values()]
    if (timingMeaningful()) {
      expect(Math.max(...counts)).toBeLessThan(100)
      expect(counts.filter((n) => n > 30).length).toBeLessThanOrEqual(4)
    }
    // Latency from when each request was due: the stall makes ≥ 1 % of them ≥ 100 ms late.
    expect(m.p99_ms).toBeGreaterThanOrEqual(100)
    // This process sent 400 requests on loopback meanwhile: the machine was busy, however lightly.
    expect(m.machine_cpu_pct).toBeGreaterThan(0)
    expect(m.machine_cpu_pct).toBeLessThanOrEqual(100)
  }, 15_000)

  it('discards its warm-up from the latency figures but still sends it', async () => {
    seen.length = 0
    const m = await paced({
      url: `${base}/warm`,
      rate: 200,
      durationS: 1.5,
      connections: 16,
      warmupS: 1,
      expectStatus: 200,
    })
    expect(seen.length).toBe(300)
    expect(m.requests).toBe(300)
    // The slow first 0.7 s were all warm-up.
    if (timingMeaningful()) expect(m.max_ms).toBeLessThan(150)
    // A wrong expected status counts as an error.
    const wrong = await paced({
      url: `${base}/fast`,
      rate: 100,
      durationS: 0.3,
      connections: 2,
      expectStatus: 402,
    })
    expect(wrong.errors).toBe(wrong.requests)
  }, 15_000)
})

describe('load (autocannon, closed loop)', () => {
  it('gives every proof to one request and measures req/s to the last answer', async () => {
    seen.length = 0
    const proofs = Array.from({ length: 500 }, (_, i) => `p-${i}`)
    const m = await load({
      url: `${base}/fast`,
      connections: 4,
      durationS: 3,
      perRequest: { header: 'x-payment', values: proofs },
      expectStatus: 200,
    })
    expect(m.requests).toBe(500)
    expect(new Set(seen.map((s) => s.proof)).size).toBe(500)
    // 500 answers from a local server take well under a second: req/s is not rounded down to whole seconds.
    if (timingMeaningful()) expect(m.rps).toBeGreaterThan(500)
    expect(m.machine_cpu_pct).toBeGreaterThan(0)
  }, 15_000)
})

describe('machineBusy', () => {
  it('reads a busy core as busy', async () => {
    const meter = machineBusy()
    const until = performance.now() + 600
    while (performance.now() < until) Math.sqrt(Math.random())
    // One of the machine's cores spun for the whole window (less what the scheduler took for others).
    const pct = meter.stopPct(performance.now())
    if (timingMeaningful())
      expect(pct).toBeGreaterThanOrEqual(Math.floor((100 / availableParallelism()) * 0.8))
    else expect(pct).toBeGreaterThan(0)
  })
})

describe('targetChecks', () => {
  /** A scenario's result with only what the checks read set apart. */
  const r = (name: string, rps: number, p99_us = 1000, machine_cpu_pct = 90) => ({
    name,
    rps,
    p50_ms: 1,
    p90_ms: 1,
    p99_ms: p99_us / 1000,
    max_ms: 1,
    p99_us,
    requests: 1,
    errors: 0,
    loadgen_cpu_pct: 10,
    machine_cpu_pct,
    ratio_to_direct: null,
  })

  it('compares ratios in one run, says what bounded them, and checks the added p99 at half load', () => {
    const checks = targetChecks([
      r('nginx', 20_000),
      r('paid-warm', 10_000, 1000, 75),
      r('half-load-direct', 5_000, 900),
      r('half-load-paid', 5_000, 1_800),
    ])
    const paid = checks.find((c) => c.name === 'paid-warm / nginx')!
    expect(paid).toMatchObject({ value: 0.5, met: true, limit: 'machine CPU busy 75 % / 90 %' })
    expect(checks.find((c) => c.name === 'added p99 µs at half load')).toMatchObject({
      value: 900,
      met: true,
    })
  })

  it('x402: met only when every authorization settled and none failed', () => {
    const x402 = (settled: number, failed: number) => ({
      ...r('x402', 700),
      requests: 1500,
      settlement: { settled, failed, drain_ms: 900 },
    })
    expect(targetChecks([x402(1500, 0)])[0]).toMatchObject({
      name: 'x402 failed settlements',
      value: 0,
      met: true,
    })
    expect(targetChecks([x402(1499, 1)])[0]).toMatchObject({ value: 1, met: false })
    // Not drained in time: nothing failed yet, but not everything is settled either.
    expect(targetChecks([x402(1200, 0)])[0]).toMatchObject({ value: 0, met: false })
  })

  it('does not call a disturbed half-load reference met', () => {
    // As in a run on a noisy machine: the upstream alone read p99 386 ms, the paid path 189 ms.
    const [check] = targetChecks([r('half-load-direct', 600, 385_791), r('half-load-paid', 600, 189_311)])
    expect(check).toMatchObject({ name: 'added p99 µs at half load', value: -196_480, met: false })
    expect(check!.limit).toContain('not measured')
  })
})
