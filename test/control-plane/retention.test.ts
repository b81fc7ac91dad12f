// Bounded history: the retention job prunes expired idempotency keys (and the key replayed after expiry is
// a new request), finished webhook deliveries with their attempts and dispatched events past retention, and
// claims once their proof is too old: a proof whose claim row is gone is still refused (proof_too_old), and
// its call stays.
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'

const HOUR = 3_600_000
// Long enough for a paid call on a loaded machine, short enough to wait for in a test.
const MAX_PROOF_AGE_MS = 10_000
let svc: TestService
let upstream: Awaited<ReturnType<typeof startUpstream>>
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>

beforeAll(async () => {
  svc = await startTestService({
    overrides: {
      // Short proof age so a proof gets too old within the test; one remembered used proof, so the replay
      // below reaches the verifier instead of the in-process spent-proof cache.
      chain: { max_proof_age_ms: MAX_PROOF_AGE_MS },
      caches: { claimed_proofs_max: 1 },
      x402: { max_timeout_seconds: 30 },
      // A fast horizon refresh: a horizon may be deleted below 1.2 s after it was announced.
      retention: { interval_ms: HOUR, claims_margin_ms: 0, batch_rows: 2, horizon_refresh_ms: 100 },
      payouts: { interval_ms: HOUR, threshold_check_interval_ms: HOUR },
      // The settlement job would mark the seeded unsettled, expired authorization `expired` (then prunable)
      // whenever its interval happens to fall inside the retention case: this file tests retention alone.
      settlement: { interval_ms: HOUR },
    },
  })
  upstream = await startUpstream()
  payer = await fundedAccount(100_000_000n)
  merchant = await registerMerchant(svc)
}, 60_000)
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

async function untilDeadline(what: string, ms: number, done: () => Promise<boolean>) {
  const deadline = Date.now() + ms
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 100))
  }
}

describe('retention', () => {
  it('prunes an expired idempotency key, and the key replayed after expiry makes a new object', async () => {
    const key = `retention-${Date.now()}`
    const post = () =>
      svc.api('/api/v1/endpoints', {
        key: merchant.key,
        body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
        headers: { 'idempotency-key': key },
      })
    const first = await post()
    expect(first.status).toBe(201)
    const replay = await post()
    expect(replay.headers.get('idempotent-replayed')).toBe('true')
    expect(replay.body.id).toBe(first.body.id)

    // 25 hours pass for this key.
    await svc.sql`UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = ${key}`
    await svc.jobs.runNow('retention')
    expect(await svc.sql`SELECT 1 FROM idempotency_keys WHERE key = ${key}`).toHaveLength(0)
    const after = await post()
    expect(after.status).toBe(201)
    expect(after.headers.get('idempotent-replayed')).toBeNull()
    expect(after.body.id).not.toBe(first.body.id)
  })

  it('prunes finished webhook deliveries, their attempts and dispatched events past retention', async () => {
    const account = merchant.account.id as string
    await svc.sql`
      INSERT INTO webhooks (id, account_id, url, events, secret, status, disabled_reason)
      VALUES ('we_ret', ${account}, 'https://example.com/hook', '{*}', 'whsec_x', 'disabled', 'test')`
    const old = new Date(Date.now() - 31 * 24 * HOUR)
    for (const [id, status, at] of [
      ['old_done', 'delivered', old],
      ['old_failed', 'failed', old],
      ['old_pending', 'pending', old],
      ['new_done', 'delivered', new Date()],
    ] as const) {
      await svc.sql`
        INSERT INTO events (id, account_id, type, data, created_at, dispatched_at)
        VALUES (${`evt_${id}`}, ${account}, 'call.captured', '{}', ${at}, ${at})`
      await svc.sql`
        INSERT INTO webhook_deliveries (id, event_id, webhook_id, status, created_at)
        VALUES (${`whd_${id}`}, ${`evt_${id}`}, 'we_ret', ${status}, ${at})`
      await svc.sql`
        INSERT INTO webhook_attempts (delivery_id, webhook_id, event_id, attempted_at, status_code)
        VALUES (${`whd_${id}`}, 'we_ret', ${`evt_${id}`}, ${at}, 200)`
    }
    // (The webhook is disabled so the dispatcher leaves its pending delivery alone while we look.)
    // An old event that never had a delivery, and one not dispatched yet (the dispatcher still owes it).
    await svc.sql`
      INSERT INTO events (id, account_id, type, data, created_at, dispatched_at)
      VALUES ('evt_lonely', ${account}, 'call.captured', '{}', ${old}, ${old})`
    await svc.jobs.runNow('retention')
    const deliveries =
      await svc.sql`SELECT id FROM webhook_deliveries WHERE webhook_id = 'we_ret' ORDER BY id`
    expect(deliveries.map((d) => d.id)).toEqual(['whd_new_done', 'whd_old_pending'])
    const attempts =
      await svc.sql`SELECT delivery_id FROM webhook_attempts WHERE webhook_id = 'we_ret' ORDER BY 1`
    expect(attempts.map((a) => a.delivery_id)).toEqual(['whd_new_done', 'whd_old_pending'])
    const events =
      await svc.sql`SELECT id FROM events WHERE id LIKE 'evt\\_%' AND account_id = ${account} ORDER BY id`
    expect(events.map((e) => e.id)).toEqual(['evt_new_done', 'evt_old_pending'])
  })

  it('prunes a claim once its proof is too old, and that proof is still refused: proof_too_old', async () => {
    const created = await svc.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    const ep = created.body as { id: string; metered_url: string }
    const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
    const key = `tx:${hash.toLowerCase()}`
    expect((await fetch(ep.metered_url, { headers: { 'x-payment': hash } })).status).toBe(200)
    await untilDeadline(
      'the capture',
      10_000,
      async () =>
        (await svc.sql`SELECT 1 FROM calls WHERE call_proof_key(proof_key, proof) = ${key}`).length === 1,
    )

    // While its claim is young the job keeps it.
    await svc.jobs.runNow('retention')
    expect(await svc.sql`SELECT status FROM claims WHERE proof_key = ${key}`).toEqual([
      { status: 'captured' },
    ])

    await untilDeadline('the claim to be pruned', 30_000, async () => {
      await svc.jobs.runNow('retention')
      return (await svc.sql`SELECT 1 FROM claims WHERE proof_key = ${key}`).length === 0
    })
    // The call is the owner's history: kept.
    expect(await svc.sql`SELECT 1 FROM calls WHERE call_proof_key(proof_key, proof) = ${key}`).toHaveLength(1)

    // Another paid call pushes the first proof out of the in-process spent-proof cache (it holds one).
    const other = await payUsdc(payer, svc.chain.treasury, 10_000n)
    expect((await fetch(ep.metered_url, { headers: { 'x-payment': other } })).status).toBe(200)

    const replay = await fetch(ep.metered_url, { headers: { 'x-payment': hash } })
    expect(replay.status).toBe(402)
    expect((await replay.json()).error).toBe('proof_too_old')
    expect(await svc.sql`SELECT 1 FROM claims WHERE proof_key = ${key}`).toHaveLength(0)
    expect(await svc.sql`SELECT 1 FROM calls WHERE call_proof_key(proof_key, proof) = ${key}`).toHaveLength(1)
  }, 60_000)

  it('keeps an x402 claim while its authorization can still be presented, or while it is owed a settlement', async () => {
    // All claimed an hour ago (far past max_timeout_seconds): what decides is validBefore and the state.
    const nowS = Math.floor(Date.now() / 1000)
    const cases = [
      // [key suffix, validBefore, status, settled, settlement error, pruned?]
      ['settled_expired', nowS - 60, 'captured', true, null, true],
      ['failed_expired', nowS - 60, 'captured', false, 'expired', true],
      ['refunded_expired', nowS - 60, 'refunded', false, null, true],
      // validBefore not passed yet: the signature is still good, only this row refuses it a second time.
      ['settled_valid', nowS + 3_600, 'captured', true, null, false],
      // Captured and never settled: the settlement batcher still needs the row, whatever its age.
      ['unsettled_expired', nowS - 60, 'captured', false, null, false],
      ['claimed_expired', nowS - 60, 'claimed', false, null, false],
    ] as const
    for (const [suffix, validBefore, status, settled, error] of cases) {
      await svc.sql`
        INSERT INTO claims (proof_key, kind, target_type, target_id, account_id, payer, amount_atomic, status,
                            retry_until, authorization_payload, claimed_at, captured_at, settled_at,
                            settlement_error, horizon_at)
        VALUES (${`auth:retention:${suffix}`}, 'eip3009', 'call', 'ep_ret', ${merchant.account.id}, '0xpayer',
                10000, ${status}, now() - interval '50 minutes', ${JSON.stringify({ validBefore: String(validBefore) })}::text::jsonb,
                now() - interval '1 hour', now() - interval '1 hour',
                ${settled ? new Date(Date.now() - 3_000_000) : null}, ${error}, to_timestamp(${validBefore}))`
    }
    const kept = cases
      .filter((c) => !c[5])
      .map((c) => c[0])
      .sort()
    const left = async () =>
      (
        await svc.sql<{ proof_key: string }[]>`
          SELECT proof_key FROM claims WHERE proof_key LIKE 'auth:retention:%' ORDER BY proof_key`
      ).map((r) => r.proof_key.slice('auth:retention:'.length))
    // A run announces the horizon, a later one (its propagation delay after) deletes below it.
    await untilDeadline('the expired authorizations to be pruned', 20_000, async () => {
      await svc.jobs.runNow('retention')
      return (await left()).length === kept.length
    })
    expect(await left()).toEqual(kept)
  })
})
