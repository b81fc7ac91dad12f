// x402 batch-settlement channel leases: an instance accepting a channel's vouchers in
// memory is SIGKILLed mid-channel (the real server PID); the other instance takes the channel over once the
// lease ran out and continues it with the published client. What the crash cost is bounded by the
// reservation and is the gateway's: nothing is charged past the deposit, the payer pays only vouchers it
// signed, and the books equal the chain after the claim.

import { createPublicClient, http } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { readChannel } from '../../src/chain/batch-channel.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { chainClients, type Funded, fundedAccount } from '../helpers/accounts.ts'
import { batchPayer } from '../helpers/batch-payer.ts'
import { type ChildService, pidAlive, startChildService } from '../helpers/child-service.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'

const PRICE = 1000n // 0.001 USDC
const RESERVE_CALLS = 5n
// A long flush interval: the killed instance has served calls whose vouchers are not written yet, up to its
// reservation (the 6th call past the last write renews the lease, which writes).
const X402 = { batch_reserve: 0.005, batch_flush_ms: 300, batch_lease_ms: 1000 }

describe.runIf(usingServer)('a channel whose leasing instance is killed', () => {
  let a: ChildService
  let b: TestService
  let treasury: Funded
  let upstream: Awaited<ReturnType<typeof startUpstream>>
  const publicClient = createPublicClient({ transport: http(chainClients().rpcUrl) })

  beforeAll(async () => {
    const databaseUrl = await freshDatabaseUrl()
    treasury = await fundedAccount(0n)
    upstream = await startUpstream()
    // b first: the migrations run once; a (the child) is the instance that holds the channel.
    b = await startTestService({ databaseUrl, treasury, overrides: { x402: X402 } })
    a = await startChildService({ databaseUrl, treasuryKey: treasury.privateKey, settings: { x402: X402 } })
  }, 120_000)
  afterAll(async () => {
    await a?.kill('SIGKILL')
    await b?.stop()
    await upstream?.close()
  })

  it('is continued by the other instance once the lease ran out: nothing charged past the deposit, the lost calls bounded by the reservation, books = chain after the claim', async () => {
    const owner = await registerMerchant(b)
    const created = await b.api('/api/v1/endpoints', {
      key: owner.key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.001, batch_settlement: true },
    })
    expect(created.status).toBe(201)
    const id = (created.body as { id: string }).id
    const caip2 = `eip155:${await publicClient.getChainId()}` as const
    const who = await fundedAccount(100_000_000n)
    const DEPOSIT_CALLS = 40n
    const { fetch: pay } = batchPayer(who, { caip2, depositMultiplier: Number(DEPOSIT_CALLS) })

    // 12 calls through a: it takes the channel's lease and accepts the vouchers in memory.
    const servedBefore = upstream.count()
    for (let i = 0; i < 12; i++) {
      const r = await pay(`${a.url}/m/${id}?i=${i}`)
      expect(r.status, await r.clone().text()).toBe(200)
      await r.arrayBuffer()
    }
    const [held] = await b.sql<{ lease_holder: string | null }[]>`SELECT lease_holder FROM batch_channels`
    expect(held!.lease_holder).toContain(`:${a.pid}:`)

    // SIGKILL the real server process mid-channel: what it had not written is lost with it.
    await a.kill('SIGKILL')
    expect(pidAlive(a.pid)).toBe(false)
    const [persisted] = await b.sql<{ charged_atomic: bigint }[]>`SELECT charged_atomic FROM batch_channels`
    const lost = 12n - persisted!.charged_atomic / PRICE
    expect(lost).toBeGreaterThanOrEqual(0n)
    expect(lost).toBeLessThanOrEqual(RESERVE_CALLS)
    process.stdout.write(`batch-settlement crash: ${lost} served calls lost with the killed instance\n`)

    // The same published client goes on through b: b takes the lease once a's ran out, the client resyncs
    // from the scheme's corrective 402 (the last persisted voucher, with its own signature) and pays on.
    for (let i = 0; i < 20; i++) {
      const r = await pay(`${b.url}/m/${id}?j=${i}`)
      expect(r.status, await r.clone().text()).toBe(200)
      await r.arrayBuffer()
    }
    await b.flushCaptures()
    const served = BigInt(upstream.count() - servedBefore)
    expect(served).toBe(32n)

    const [channel] = await b.sql<
      { channel_id: `0x${string}`; charged_atomic: bigint; balance_atomic: bigint; lease_holder: string }[]
    >`SELECT channel_id, charged_atomic, balance_atomic, lease_holder FROM batch_channels`
    expect(channel!.lease_holder).not.toContain(`:${a.pid}:`)
    // Nothing charged past the deposit; every served call is charged except the ones a lost (≤ reserve).
    expect(channel!.balance_atomic).toBe(DEPOSIT_CALLS * PRICE)
    expect(channel!.charged_atomic).toBe((32n - lost) * PRICE)
    expect(channel!.charged_atomic).toBeLessThanOrEqual(channel!.balance_atomic)

    // The claim: books = chain.
    await b.jobs.runNow('batch-claims')
    const onChain = await readChannel(publicClient, channel!.channel_id)
    expect(onChain.totalClaimed).toBe(channel!.charged_atomic)
    const [books] = await b.sql<{ calls: number; amount: string; claimed: string; owner: string }[]>`
      SELECT (SELECT count(*)::int FROM calls) AS calls,
             (SELECT coalesce(sum(amount_atomic), 0)::text FROM calls) AS amount,
             (SELECT claimed_atomic::text FROM batch_channels) AS claimed,
             (SELECT coalesce(sum(amount_atomic), 0)::text FROM ledger_entries WHERE kind = 'owner_share') AS owner`
    expect(books!.calls).toBe(Number(32n - lost))
    expect(BigInt(books!.amount)).toBe(onChain.totalClaimed)
    expect(BigInt(books!.claimed)).toBe(onChain.totalClaimed)
    expect(BigInt(books!.owner)).toBe((onChain.totalClaimed * 95n) / 100n)
    const report = await reconcile({ sql: b.sql, chain: b.chain, config: b.config })
    expect(report.differences).toEqual([])
  }, 180_000)
})
