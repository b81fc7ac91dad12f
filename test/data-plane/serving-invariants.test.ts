// The serving invariants on a running service: a proof is taken over only after an explicit release by the
// request whose upstream attempt failed; a claim whose lease ran out without one is in doubt, never served
// again, and refunded at the end of its window. The clock is injected by moving the claim's lease and window.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { checkClaims } from '../../src/control-plane/jobs/reconcile-claims.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

type Upstream = Awaited<ReturnType<typeof startUpstream>>

let svc: TestService
let upstream: Upstream
let payer: Funded
let key: string
/** Requests the upstream received per path: what was served (or at least reached the upstream). */
const served = new Map<string, number>()
/** /gate requests wait here until the test opens them. */
let openGate: (() => void) | null = null
/** /stall requests never get an answer (closed when the test ends). */
const stalled: Array<{ destroy(): void }> = []
/** /flaky answers 503 until this is set. */
let flakyUp = false

beforeAll(async () => {
  svc = await startTestService()
  upstream = await startUpstream((req, res) => {
    const path = req.url!.split('?')[0]!
    served.set(path, (served.get(path) ?? 0) + 1)
    if (path === '/gate') {
      openGate = () => res.writeHead(200, { 'content-type': 'application/json' }).end('{"late":true}')
      return true
    }
    if (path === '/stall') {
      stalled.push(res)
      return true
    }
    if (path === '/flaky') {
      if (flakyUp) res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}')
      else res.writeHead(503).end('down')
      return true
    }
    return false
  })
  payer = await fundedAccount(100_000_000n)
  key = (await registerMerchant(svc)).key
})
afterAll(async () => {
  for (const res of stalled) res.destroy()
  await svc?.stop()
  await upstream?.close()
})

async function endpoint(path: string): Promise<string> {
  const r = await svc.api('/api/v1/endpoints', {
    key,
    body: { upstream_url: `${upstream.url}${path}`, price: 0.01 },
  })
  return r.body.metered_url as string
}

async function claim(hash: string) {
  const [row] = await svc.sql`
    SELECT status, attempts, releases FROM claims WHERE proof_key = ${`tx:${hash.toLowerCase()}`}`
  return row
}

describe('a proof serves at most once', () => {
  it('a claim whose holder vanished mid-call is never won again, and is refunded after its window', async () => {
    const url = await endpoint('/gate')
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    // The caller leaves while the upstream is working on it: the call may have been served.
    const aborter = new AbortController()
    const first = fetch(url, { headers: { 'x-payment': hash }, signal: aborter.signal }).catch(() => null)
    await waitFor(() => served.get('/gate') === 1, {
      what: 'the upstream to receive the call',
      timeoutMs: 10_000,
    })
    aborter.abort()
    await first
    openGate?.()
    await svc.flushCaptures()
    expect(await claim(hash)).toEqual({ status: 'claimed', attempts: 1, releases: 0 })

    // While its lease runs, a retry is told the proof is in use (409), not asked to pay.
    const during = await fetch(url, { headers: { 'x-payment': hash } })
    expect(during.status).toBe(409)
    expect((await during.json()).error.code).toBe('payment_in_progress')

    // The lease ran out without a release (as if its process died), longer ago than a holder's outcome can
    // take to land (DOUBT_GRACE_MS): in doubt, never served again.
    await svc.sql`UPDATE claims SET lease_until = now() - interval '1 minute' WHERE proof_key = ${`tx:${hash}`}`
    const after = await fetch(url, { headers: { 'x-payment': hash } })
    expect(after.status).toBe(402)
    expect((await after.json()).error).toBe('proof_already_used')
    expect(served.get('/gate')).toBe(1)
    expect(await claim(hash)).toEqual({ status: 'claimed', attempts: 1, releases: 0 })

    // End of the window: refunded to the payer, so they are never charged for a call that may not have run.
    await svc.sql`UPDATE claims SET retry_until = now() - interval '1 second' WHERE proof_key = ${`tx:${hash}`}`
    await svc.jobs.runNow('claim-expiry')
    expect((await claim(hash))!.status).toBe('refund_due')
    const refunds = await svc.sql`
      SELECT wallet, amount_atomic FROM ledger_entries WHERE kind = 'refund' AND source_id = ${`tx:${hash}`}`
    expect(refunds).toEqual([{ wallet: payer.address, amount_atomic: 10_000n }])
  })

  it('a claim released after a 5xx is retried once within its window, then captured once', async () => {
    const url = await endpoint('/flaky')
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    flakyUp = false
    expect((await fetch(url, { headers: { 'x-payment': hash } })).status).toBe(503)
    await waitFor(async () => (await claim(hash))!.releases === 1, { what: 'the release', timeoutMs: 10_000 })
    expect(await claim(hash)).toEqual({ status: 'claimed', attempts: 1, releases: 1 })

    flakyUp = true
    const retry = await fetch(url, { headers: { 'x-payment': hash } })
    expect(retry.status).toBe(200)
    await svc.flushCaptures()
    expect(await claim(hash)).toEqual({ status: 'captured', attempts: 2, releases: 1 })
    const replay = await fetch(url, { headers: { 'x-payment': hash } })
    expect(replay.status).toBe(402)
    expect(served.get('/flaky')).toBe(2)
    const calls =
      await svc.sql`SELECT upstream_status FROM calls WHERE call_proof_key(proof_key, proof) = ${`tx:${hash}`}`
    expect(calls).toEqual([{ upstream_status: 200 }])
  })

  it('a call whose upstream did not answer in time is in doubt: never released, never served again', async () => {
    const url = await endpoint('/stall')
    const id = url.split('/m/')[1]!
    await svc.sql`UPDATE endpoints SET timeout_ms = 300 WHERE id = ${id}`
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const first = await fetch(url, { headers: { 'x-payment': hash } })
    expect(first.status).toBe(504)
    expect((await first.json()).error.code).toBe('upstream_timeout')
    expect(served.get('/stall')).toBe(1)
    // The request reached the upstream, which may have done the work: a retry is not forwarded.
    const retry = await fetch(url, { headers: { 'x-payment': hash } })
    expect(retry.status).toBe(409)
    expect(served.get('/stall')).toBe(1)
    expect(await claim(hash)).toEqual({ status: 'claimed', attempts: 1, releases: 0 })
    // Its lease runs out: still never served again; the window's end refunds it.
    await svc.sql`UPDATE claims SET lease_until = now() - interval '1 second', retry_until = now() - interval '1 second'
                  WHERE proof_key = ${`tx:${hash}`}`
    expect((await fetch(url, { headers: { 'x-payment': hash } })).status).toBe(402)
    await svc.jobs.runNow('claim-expiry')
    expect((await claim(hash))!.status).toBe('refund_due')
    expect(served.get('/stall')).toBe(1)
  })

  it('reconcile finds nothing wrong with what these calls left', async () => {
    const check = await checkClaims(svc.sql, { from: new Date(0), to: new Date(Date.now() + 60_000) })
    expect(check.differences).toEqual([])
    expect(check.claims).toBeGreaterThanOrEqual(2)
  })
})
