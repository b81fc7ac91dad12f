// Archiving a closed month (npm run archive): refused while its money is open or for a month not closed,
// nothing dropped then; once paid out and its claims pruned, its partitions go to checked gzip files and are
// dropped whole, and the service still answers for the other months (GET /calls, the balance), reconcile is
// clean, a replayed proof of the archived month is refused (below the stored horizon), and a tampered
// archive file fails --verify. Old rows are faked by moving created_at back by SQL, as the retention tests do.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Address, Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ArchiveRefused, archiveMonths } from '../../src/books/archive.ts'
import { createAuthorizationNonce, signTransferAuthorization } from '../../src/chain/authorization.ts'
import { runArchive } from '../../src/cli/archive.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { addMonths, monthBounds, monthOf, monthPartitions } from '../../src/db/partitions.ts'
import { type Funded, fundedAccount, payUsdc } from '../helpers/accounts.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'
import { waitFor } from '../helpers/wait-for.ts'

const HOUR = 3_600_000
let svc: TestService
let upstream: Awaited<ReturnType<typeof startUpstream>>
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>
let out: string
// The month the file was loaded in: a run that crosses into the next month still asks about this one (its
// refusal of a month not closed is as of this moment, not of a later clock that has closed it).
const loadedAtMs = Date.now()
const current = monthOf(loadedAtMs)
const old = addMonths(current, -2)
const oldSuffix = old.replace('-', '_')

beforeAll(async () => {
  svc = await startTestService({
    overrides: {
      // A short proof age so the old month's claims can be pruned (below the horizon) within the test; one
      // remembered spent proof, so the replay reaches the verifier.
      chain: { max_proof_age_ms: 5_000 },
      // The authorization below is valid for 10 s only: its claim falls below the stored horizon in the test.
      x402: { max_timeout_seconds: 30 },
      caches: { claimed_proofs_max: 1 },
      retention: {
        interval_ms: HOUR,
        claims_margin_ms: 0,
        horizon_refresh_ms: 100,
        partitions_interval_ms: HOUR,
      },
      payouts: { interval_ms: HOUR, threshold_check_interval_ms: HOUR },
      settlement: { interval_ms: HOUR },
    },
  })
  upstream = await startUpstream()
  payer = await fundedAccount(100_000_000n)
  merchant = await registerMerchant(svc)
  out = mkdtempSync(join(tmpdir(), 'tollgate-archive-'))
}, 60_000)
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
  if (out) rmSync(out, { recursive: true, force: true })
})

async function paidCall(url: string): Promise<{ hash: string; callId: string }> {
  const hash = await payUsdc(payer, svc.chain.treasury, 10_000n)
  expect((await fetch(url, { headers: { 'x-payment': hash } })).status).toBe(200)
  const key = `tx:${hash.toLowerCase()}`
  const rows = await waitFor(
    async () => {
      const r = await svc.sql<
        { id: string }[]
      >`SELECT id FROM calls WHERE call_proof_key(proof_key, proof) = ${key}`
      return r.length === 1 ? r : null
    },
    { what: 'the capture', timeoutMs: 10_000 },
  )
  return { hash, callId: rows[0]!.id }
}

/** An x402 exact payment (EIP-3009, signed by the payer) for the endpoint, as an x402 v1 client sends it. */
async function exactPayment(url: string): Promise<string> {
  const offer = await fetch(url)
  const body = (await offer.json()) as {
    accepts: Array<{
      scheme: string
      network: string
      payTo: Address
      asset: Address
      extra: { name: string; version: string }
    }>
  }
  const exact = body.accepts.find((a) => a.scheme === 'exact')!
  const validBefore = BigInt(Math.floor(Date.now() / 1000) + 10)
  const { authorization, signature } = await signTransferAuthorization(
    privateKeyToAccount(payer.privateKey as Hex),
    {
      usdc: { address: exact.asset, name: exact.extra.name, version: exact.extra.version },
      chainId: svc.chain.publicClient.chain?.id ?? (await svc.chain.publicClient.getChainId()),
      to: exact.payTo,
      value: 10_000n,
      validAfter: 0n,
      validBefore,
      nonce: createAuthorizationNonce(),
    },
  )
  const payload = {
    x402Version: 1,
    scheme: 'exact',
    network: exact.network,
    payload: {
      signature,
      authorization: {
        ...authorization,
        value: authorization.value.toString(),
        validAfter: authorization.validAfter.toString(),
        validBefore: authorization.validBefore.toString(),
      },
    },
  }
  return Buffer.from(JSON.stringify(payload)).toString('base64')
}

// The figures, without as_of: a balance is read anew each time, so its time moves while its figures do not.
const balance = async () => {
  const { as_of: _asOf, ...figures } = (await svc.api('/api/v1/account', { key: merchant.key })).body.balance
  return figures
}

describe('archive', () => {
  let ep: { id: string; metered_url: string }
  let oldCalls: Array<{ hash: string; callId: string }>
  let exactHeader: string
  let exactCallId: string
  let kept: { hash: string; callId: string }

  it('a call dated in a month without a partition lands in the default one; the job gives it its month', async () => {
    ep = (
      await svc.api('/api/v1/endpoints', {
        key: merchant.key,
        body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
      })
    ).body
    oldCalls = [await paidCall(ep.metered_url), await paidCall(ep.metered_url)]
    // An x402 exact call, settled on chain at once (its revenue is booked at settlement).
    exactHeader = await exactPayment(ep.metered_url)
    expect((await fetch(ep.metered_url, { headers: { 'X-PAYMENT': exactHeader } })).status).toBe(200)
    await svc.jobs.runNow('x402-settlement')
    const settled = await waitFor(
      async () => {
        const r = await svc.sql<{ target_id: string }[]>`
          SELECT target_id FROM claims WHERE kind = 'eip3009' AND settled_at IS NOT NULL`
        if (r.length === 0) await svc.jobs.runNow('x402-settlement')
        return r.length === 1 ? r : null
      },
      { what: 'the x402 settlement', timeoutMs: 20_000, intervalMs: 200 },
    )
    exactCallId = (await svc.sql<{ id: string }[]>`SELECT id FROM calls WHERE scheme = 'exact'`)[0]!.id
    // Claimed long ago as far as retention's claim-time bound goes; its validBefore decides.
    await svc.sql`UPDATE claims SET claimed_at = now() - interval '1 hour' WHERE kind = 'eip3009'`
    expect(settled).toHaveLength(1)
    const ids = [...oldCalls.map((c) => c.callId), exactCallId]
    const at = new Date(monthBounds(old).from.getTime() + 3 * 86_400_000)
    // Two months back: the migration made no partition that old, so the rows move into the default one.
    await svc.sql`UPDATE calls SET created_at = ${at} WHERE id = ANY(${ids})`
    // The capture batches of the two tx calls (each alone in its batch: the calls were made one after the
    // other) share their calls' created_at, so their entries go with them. The exact call's settlement batch
    // stays in this month: a call served in one month and settled in the next.
    await svc.sql`
      UPDATE ledger_entries SET created_at = ${at}
      WHERE source_type = 'capture_batch'
        AND source_id IN (SELECT ledger_batch_id::text FROM calls WHERE id = ANY(${ids}))`
    expect(await svc.sql`SELECT 1 FROM calls_default`).toHaveLength(3)
    await svc.jobs.runNow('partitions')
    expect(await svc.sql`SELECT 1 FROM calls_default`).toHaveLength(0)
    expect(await svc.sql`SELECT 1 FROM ${svc.sql(`calls_${oldSuffix}`)}`).toHaveLength(3)
    expect(await svc.sql`SELECT 1 FROM ${svc.sql(`ledger_entries_${oldSuffix}`)}`).toHaveLength(4)
    kept = await paidCall(ep.metered_url)
  }, 60_000)

  it('refuses a month not closed, and one whose money is open; nothing dropped', async () => {
    await expect(
      archiveMonths(svc.sql, { before: addMonths(current, 1), outDir: out, nowMs: loadedAtMs }),
    ).rejects.toThrow(/is not closed yet/)
    // Its entries are not paid out yet, its claims not settled into the past.
    const refused = archiveMonths(svc.sql, { before: current, outDir: out, nowMs: Date.now() })
    await expect(refused).rejects.toBeInstanceOf(ArchiveRefused)
    await expect(refused).rejects.toThrow(/not paid by a confirmed payout/)
    expect((await monthPartitions(svc.sql, 'calls')).map((p) => p.month)).toContain(old)
  })

  it('archives a paid-out month: the API, balances and reconcile answer for the rest; a replay is refused', async () => {
    await svc.jobs.runNow('payout-batch')
    expect(await svc.sql`SELECT 1 FROM payouts WHERE status <> 'confirmed'`).toHaveLength(0)
    // Retention prunes the claims once their proofs are below the stored horizon.
    const keys = oldCalls.map((c) => `tx:${c.hash.toLowerCase()}`)
    await waitFor(
      async () => {
        await svc.jobs.runNow('retention')
        return (
          (await svc.sql`SELECT 1 FROM claims WHERE proof_key = ANY(${keys}) OR kind = 'eip3009'`).length ===
          0
        )
      },
      { what: 'the old claims to be pruned', timeoutMs: 30_000, intervalMs: 200 },
    )
    const before = await balance()

    const done = await archiveMonths(svc.sql, { before: current, outDir: out, nowMs: Date.now() })
    expect(done.map((d) => d.month)).toContain(old)
    const month = done.find((d) => d.month === old)!
    expect(month.files.map((f) => [f.table, f.rows])).toEqual([
      ['calls', 3],
      ['ledger_entries', 4],
    ])
    expect((await monthPartitions(svc.sql, 'calls')).map((p) => p.month)).not.toContain(old)
    const manifest = JSON.parse(readFileSync(join(out, old, 'manifest.json'), 'utf8'))
    expect(
      manifest.ledger_sums.reduce(
        (s: bigint, r: { amount_atomic: string }) => s + BigInt(r.amount_atomic),
        0n,
      ),
    ).toBe(20_000n)
    // The exact call left with its month; its settlement batch, still online, keeps its calls' sums.
    const [carried] = await svc.sql<{ batch: string; calls: string; total: string }[]>`
      SELECT batch_id::text AS batch, calls::text, (owner_share_atomic + fee_atomic)::text AS total
      FROM archived_batch_calls`
    expect(carried).toMatchObject({ calls: '1', total: '10000' })
    expect(
      await svc.sql`SELECT 1 FROM ledger_entries WHERE source_type = 'settlement_batch' AND source_id = ${carried!.batch}`,
    ).toHaveLength(2)

    // The other months still answer.
    const listed = await svc.api('/api/v1/calls', { key: merchant.key })
    expect(listed.status).toBe(200)
    expect(listed.body.data.map((c: { id: string }) => c.id)).toEqual([kept.callId])
    expect(await balance()).toEqual(before)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
    expect(report.ok).toBe(true)
    expect(report.batches.mismatched).toBe(0)
    // The carried sums are what the batch is held to: one base unit off is a difference.
    await svc.sql`UPDATE archived_batch_calls SET fee_atomic = fee_atomic + 1`
    const off = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(off.differences.join('\n')).toContain(`settlement batch ${carried!.batch} of account`)
    await svc.sql`UPDATE archived_batch_calls SET fee_atomic = fee_atomic - 1`

    // Another paid call pushes the old proof out of the spent-proof cache; the replay is refused by age.
    await paidCall(ep.metered_url)
    const replay = await fetch(ep.metered_url, { headers: { 'x-payment': oldCalls[0]!.hash } })
    expect(replay.status).toBe(402)
    expect((await replay.json()).error).toBe('proof_too_old')
    // The x402 authorization of the archived month: its validBefore is below the stored horizon.
    const again = await fetch(ep.metered_url, { headers: { 'X-PAYMENT': exactHeader } })
    expect(again.status).toBe(402)
    expect((await again.json()).error).toBe('authorization_expired')
    expect(await svc.sql`SELECT 1 FROM calls WHERE id = ${exactCallId}`).toHaveLength(0)
  }, 90_000)

  it('--verify checks the files; a tampered one fails', async () => {
    const said: string[] = []
    expect(await runArchive(['--verify', out], (s) => said.push(s))).toBe(0)
    expect(said.join('')).toMatch(/^OK: \d+ files verified/)
    const path = join(out, old, 'calls.tsv.gz')
    const bytes = readFileSync(path)
    bytes[bytes.length - 5] = bytes[bytes.length - 5]! ^ 0xff
    writeFileSync(path, bytes)
    const after: string[] = []
    expect(await runArchive(['--verify', join(out, old)], (s) => after.push(s))).toBe(1)
    expect(after.join('')).toMatch(/calls\.tsv\.gz: (sha256|unreadable)/)
  })
})
