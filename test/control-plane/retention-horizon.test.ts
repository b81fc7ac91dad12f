// The must-show of retention by a stored horizon: a claim pruned under a short proof age, then the service
// restarted with a far longer one: the old transaction hash is refused (proof_too_old), never served or
// booked again. Without the stored horizon the restarted service accepted it by its own, longer age.
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { DeepPartial } from '../../src/config/load.ts'
import type { Settings } from '../../src/config/schema.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { freshDatabaseUrl } from '../helpers/database.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

const HOUR = 3_600_000
// Long enough for a paid call on a loaded machine, short enough to wait for in a test.
const SHORT_AGE_MS = 8_000

let upstream: Awaited<ReturnType<typeof startUpstream>>
let payer: Funded
let dataDir: string | null = null
let databaseUrl: string | null
const services: TestService[] = []

/** One instance of the service on the shared database (a server's, or one embedded data directory). */
async function start(maxProofAgeMs: number, treasury?: Funded): Promise<TestService> {
  const svc = await startTestService({
    databaseUrl,
    ...(treasury ? { treasury } : {}),
    overrides: {
      chain: { max_proof_age_ms: maxProofAgeMs },
      // One remembered spent proof: a replay reaches the verifier, not the in-process cache.
      caches: { claimed_proofs_max: 1 },
      retention: { interval_ms: HOUR, claims_margin_ms: 0, horizon_refresh_ms: 100 },
      payouts: { interval_ms: HOUR, threshold_check_interval_ms: HOUR },
      ...(dataDir ? { database: { data_dir: dataDir } } : {}),
    } as DeepPartial<Settings>,
  })
  services.push(svc)
  return svc
}

beforeAll(async () => {
  databaseUrl = await freshDatabaseUrl()
  if (!databaseUrl) dataDir = join(mkdtempSync(join(tmpdir(), 'tollgate-horizon-')), 'pglite')
  upstream = await startUpstream()
  payer = await fundedAccount(100_000_000n)
}, 60_000)
afterAll(async () => {
  for (const s of services) await s.stop().catch(() => {})
  await upstream?.close()
  if (dataDir) rmSync(join(dataDir, '..'), { recursive: true, force: true })
})

describe('retention horizon across a restart', () => {
  it('pruned under a short proof age, restarted with a long one: the old hash is refused', async () => {
    const first = await start(SHORT_AGE_MS)
    const merchant = await registerMerchant(first)
    const created = await first.api('/api/v1/endpoints', {
      key: merchant.key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    const ep = created.body as { id: string; metered_url: string }
    const hash = await payUsdc(payer, first.chain.treasury, 10_000n)
    const key = `tx:${hash.toLowerCase()}`
    expect((await fetch(ep.metered_url, { headers: { 'x-payment': hash } })).status).toBe(200)
    await waitFor(
      async () =>
        (await first.sql`SELECT 1 FROM calls WHERE call_proof_key(proof_key, proof) = ${key}`).length === 1,
      {
        timeoutMs: 10_000,
        what: 'the capture',
      },
    )
    // The claim is pruned once its proof is older than the short age (and that horizon has propagated).
    await waitFor(
      async () => {
        await first.jobs.runNow('retention')
        return (await first.sql`SELECT 1 FROM claims WHERE proof_key = ${key}`).length === 0
      },
      { timeoutMs: 40_000, intervalMs: 200, what: 'the claim to be pruned' },
    )
    const treasury = first.treasury
    await first.stop()

    // Restarted with a proof age of an hour: by its own configuration the hash is young enough.
    const second = await start(HOUR, treasury)
    const served = upstream.count()
    const replay = await fetch(`${second.url}/m/${ep.id}`, { headers: { 'x-payment': hash } })
    expect(replay.status).toBe(402)
    expect((await replay.json()).error).toBe('proof_too_old')
    expect(upstream.count()).toBe(served)
    // Booked once: one call, one owner share.
    expect(
      await second.sql`SELECT 1 FROM calls WHERE call_proof_key(proof_key, proof) = ${key}`,
    ).toHaveLength(1)
    const shares = await second.sql`
      SELECT 1 FROM ledger_entries l
      JOIN calls c ON l.source_type = 'capture_batch' AND l.source_id = c.ledger_batch_id::text
        AND l.account_id = c.account_id
      WHERE call_proof_key(c.proof_key, c.proof) = ${key} AND l.kind = 'owner_share'`
    expect(shares).toHaveLength(1)
    // The restart with the longer age did not lower the stored horizon.
    await second.jobs.runNow('retention')
    const [h] = await second.sql<{ max_age_ms: bigint }[]>`
      SELECT max_age_ms FROM proof_horizons WHERE kind = 'tx'`
    expect(h!.max_age_ms).toBe(BigInt(HOUR))
    const again = await fetch(`${second.url}/m/${ep.id}`, { headers: { 'x-payment': hash } })
    expect(again.status).toBe(402)
  }, 120_000)
})
