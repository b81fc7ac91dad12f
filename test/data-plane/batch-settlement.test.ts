// x402 `batch-settlement` end to end: the published @x402/evm batch-settlement client with
// @x402/fetch, unpatched, against a real tollgate on the shared anvil (the project's own channel contracts
// at the addresses the client expects), a real upstream and a real database.
import { computeChannelId, signVoucher } from '@x402/evm/batch-settlement/client'
import { createPublicClient, http } from 'viem'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { BATCH_SETTLEMENT_ADDRESS, type ChannelConfig, readChannel } from '../../src/chain/batch-channel.ts'
import { reconcile } from '../../src/control-plane/jobs/reconcile.ts'
import { chainClients, erc20, type Funded, fundedAccount } from '../helpers/accounts.ts'
import { batchPayer } from '../helpers/batch-payer.ts'
import { freshDatabaseUrl, usingServer } from '../helpers/database.ts'
import { checkPaymentProtocol } from '../helpers/payment-checks.ts'
import { registerMerchant, startTestService, type TestService } from '../helpers/service.ts'
import { startUpstream } from '../helpers/upstream.ts'

checkPaymentProtocol()

const CALLS = Number(process.env.BATCH_CALLS ?? 100)
const PRICE = 1000n // 0.001 USDC
const DEPOSIT_MULTIPLIER = CALLS + CALLS / 2

let svc: TestService
let upstream: Awaited<ReturnType<typeof startUpstream>>
let payer: Funded
let merchant: Awaited<ReturnType<typeof registerMerchant>>
const { rpcUrl, usdc } = chainClients()
const publicClient = createPublicClient({ transport: http(rpcUrl) })

let caip2: `eip155:${number}`

function payingFetch(who: Funded, multiplier = DEPOSIT_MULTIPLIER) {
  return batchPayer(who, { caip2, depositMultiplier: multiplier })
}

async function usdcOf(address: `0x${string}`): Promise<bigint> {
  return publicClient.readContract({ address: usdc, abi: erc20, functionName: 'balanceOf', args: [address] })
}

/** Deposit transactions of one payer since `from` (other test files deposit on the shared chain too). */
async function depositTxCount(from: bigint, who: `0x${string}`): Promise<number> {
  const logs = await publicClient.getLogs({ address: BATCH_SETTLEMENT_ADDRESS, fromBlock: from })
  // Deposited(bytes32 indexed channelId, address indexed payer, address collector, uint128 amount).
  const payerTopic = `0x${who.slice(2).toLowerCase().padStart(64, '0')}`
  return new Set(
    logs
      .filter((l) => l.topics.length === 3 && l.data.length === 2 + 128 && l.topics[2] === payerTopic)
      .map((l) => l.transactionHash),
  ).size
}

beforeAll(async () => {
  svc = await startTestService({ adminToken: 'admin-token-for-tests-0123456789' })
  upstream = await startUpstream()
  payer = await fundedAccount(1_000_000_000n)
  merchant = await registerMerchant(svc)
  caip2 = `eip155:${await publicClient.getChainId()}`
})
afterAll(async () => {
  await svc?.stop()
  await upstream?.close()
})

async function createEndpoint(batch: boolean) {
  const r = await svc.api('/api/v1/endpoints', {
    key: merchant.key,
    body: { upstream_url: `${upstream.url}/echo`, price: 0.001, batch_settlement: batch },
  })
  if (r.status !== 201) throw new Error(`create endpoint: ${r.status} ${r.text}`)
  return r.body as { id: string; metered_url: string; batch_settlement: boolean }
}

describe('batch-settlement offer', () => {
  it('is off by default and offered next to exact when the owner turns it on', async () => {
    const off = await createEndpoint(false)
    expect(off.batch_settlement).toBe(false)
    const plain = await fetch(off.metered_url)
    const offPr = JSON.parse(Buffer.from(plain.headers.get('payment-required')!, 'base64').toString())
    expect(offPr.accepts.map((a: { scheme: string }) => a.scheme)).toEqual(['exact'])
    const on = await createEndpoint(true)
    const r = await fetch(on.metered_url)
    expect(r.status).toBe(402)
    const pr = JSON.parse(Buffer.from(r.headers.get('payment-required')!, 'base64').toString())
    const batch = pr.accepts.find((a: { scheme: string }) => a.scheme === 'batch-settlement')
    expect(batch).toMatchObject({
      amount: PRICE.toString(),
      payTo: svc.treasury.address,
      extra: { withdrawDelay: 900 },
    })
    expect(batch.extra.receiverAuthorizer).toBe(svc.treasury.address)
  })
})

describe('pay once, call many', () => {
  it(`opens a channel with one deposit, serves ${CALLS} paid calls, claims them in a bounded number of transactions, refunds the rest`, async () => {
    const ep = await createEndpoint(true)
    const startBlock = await publicClient.getBlockNumber()
    const payerBefore = await usdcOf(payer.address)
    const { fetch: pay, scheme } = payingFetch(payer)
    const forwardedBefore = upstream.count()
    const started = performance.now()
    for (let i = 0; i < CALLS; i++) {
      const r = await pay(`${ep.metered_url}?i=${i}`)
      if (r.status !== 200) throw new Error(`call ${i}: ${r.status} ${await r.text()}`)
      await r.arrayBuffer()
    }
    const ms = performance.now() - started
    process.stdout.write(
      `batch-settlement: ${CALLS} paid calls in ${Math.round(ms)} ms (${Math.round((CALLS * 1000) / ms)}/s)\n`,
    )
    expect(upstream.count() - forwardedBefore).toBe(CALLS)
    expect(await depositTxCount(startBlock, payer.address)).toBe(1)
    const deposit = PRICE * BigInt(DEPOSIT_MULTIPLIER)
    expect(payerBefore - (await usdcOf(payer.address))).toBe(deposit)

    // The claims: one leader run claims every served voucher of the channel in one transaction.
    // Captures are group-committed after the answers: wait until every call's is written.
    const captureDeadline = Date.now() + 10_000
    for (;;) {
      const [c] = await svc.sql<{ n: number }[]>`
        SELECT count(*)::int AS n FROM claims c JOIN batch_channels b ON c.proof_key LIKE 'batch:' || b.channel_id || ':%'
        WHERE c.kind = 'batch' AND c.status = 'captured' AND b.payer = ${payer.address}`
      if (c!.n === CALLS || Date.now() > captureDeadline) break
      await new Promise((r) => setTimeout(r, 50))
    }
    await svc.jobs.runNow('batch-claims')
    const [claims] = await svc.sql<{ n: number; total: string }[]>`
      SELECT count(*)::int AS n, coalesce(sum(total_atomic), 0)::text AS total FROM batch_claims`
    expect(claims!.n).toBe(1)
    expect(BigInt(claims!.total)).toBe(PRICE * BigInt(CALLS))
    // Revenue booked for every call: owner 95 %, fee 5 %, to the base unit.
    const [ledger] = await svc.sql<{ owner: string; fee: string }[]>`
      SELECT coalesce(sum(amount_atomic) FILTER (WHERE kind = 'owner_share'), 0)::text AS owner,
             coalesce(sum(amount_atomic) FILTER (WHERE kind = 'fee'), 0)::text AS fee
      FROM ledger_entries WHERE account_id = ${merchant.account.id}`
    expect(BigInt(ledger!.owner)).toBe((PRICE * BigInt(CALLS) * 95n) / 100n)
    expect(BigInt(ledger!.fee)).toBe((PRICE * BigInt(CALLS) * 5n) / 100n)

    // The cooperative refund (the client's own refund flow) returns the unspent deposit.
    const beforeRefund = await usdcOf(payer.address)
    const settle = await scheme.refund(ep.metered_url)
    expect(settle.success).toBe(true)
    expect((await usdcOf(payer.address)) - beforeRefund).toBe(deposit - PRICE * BigInt(CALLS))
    const channelId = (
      await svc.sql<{ channel_id: `0x${string}` }[]>`SELECT channel_id FROM batch_channels`
    )[0]!.channel_id
    expect(await readChannel(publicClient, channelId)).toEqual({
      balance: PRICE * BigInt(CALLS),
      totalClaimed: PRICE * BigInt(CALLS),
    })

    // The owner's payout: 95 % of the calls, to the base unit; then the books reconcile with the chain.
    const ownerBefore = await usdcOf(merchant.wallet as `0x${string}`)
    await svc.jobs.runNow('payout-batch')
    const due = (PRICE * BigInt(CALLS) * 95n) / 100n
    const deadline = Date.now() + 30_000
    while ((await usdcOf(merchant.wallet as `0x${string}`)) - ownerBefore < due && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100))
    expect((await usdcOf(merchant.wallet as `0x${string}`)) - ownerBefore).toBe(due)
    const report = await reconcile({ sql: svc.sql, chain: svc.chain, config: svc.config })
    expect(report.differences).toEqual([])
    expect(report.ok).toBe(true)
  }, 600_000)
})

/** A voucher payment header built by hand from the published client's own signing function. */
async function voucherHeader(
  accepted: Record<string, unknown>,
  config: ChannelConfig,
  q: { cumulative: bigint; signer: Funded; channelId?: `0x${string}` },
) {
  const channelId = q.channelId ?? computeChannelId(config, caip2)
  const voucher = await signVoucher(q.signer.account, channelId, q.cumulative.toString(), caip2)
  const payment = { x402Version: 2, accepted, payload: { type: 'voucher', channelConfig: config, voucher } }
  return Buffer.from(JSON.stringify(payment)).toString('base64')
}

async function refusedWith(url: string, header: string, reason: string) {
  const before = upstream.count()
  const r = await fetch(url, { headers: { 'payment-signature': header } })
  expect(r.status).toBe(402)
  const body = await r.json()
  expect(body.error).toBe(reason)
  expect(upstream.count()).toBe(before)
  return r
}

describe('refused vouchers', () => {
  it('replayed, below the charged cumulative, forged, high-s, for another channel, past the deposit: 402 with the reason, nothing forwarded', async () => {
    const ep = await createEndpoint(true)
    const who = await fundedAccount(100_000_000n)
    // A deposit of 4 calls (the client's minimum multiplier is 3).
    const { fetch: pay, scheme, sent } = payingFetch(who, 4)
    for (let i = 0; i < 3; i++) expect((await pay(ep.metered_url)).status).toBe(200)
    const probe = await fetch(ep.metered_url)
    const required = JSON.parse(Buffer.from(probe.headers.get('payment-required')!, 'base64').toString())
    const accepted = required.accepts.find((a: { scheme: string }) => a.scheme === 'batch-settlement')
    const config = scheme.buildChannelConfig(accepted) as ChannelConfig

    // The last paid request sent again, as is: refused with the channel state, as the reference server does
    // (its client sends a voucher again only when it never saw that call's answer, and resyncs from it).
    const replayed = await refusedWith(
      ep.metered_url,
      sent.at(-1)!,
      'invalid_batch_settlement_evm_cumulative_amount_mismatch',
    )
    const shown = JSON.parse(Buffer.from(replayed.headers.get('payment-required')!, 'base64').toString())
    expect(
      shown.accepts.find((a: { scheme: string }) => a.scheme === 'batch-settlement').extra.channelState,
    ).toMatchObject({ chargedCumulativeAmount: (3n * PRICE).toString() })
    // Below what is charged (3 calls): the scheme's corrective reason, with the channel state to resync.
    const below = await refusedWith(
      ep.metered_url,
      await voucherHeader(accepted, config, { cumulative: PRICE, signer: who }),
      'invalid_batch_settlement_evm_cumulative_below_claimed',
    )
    const corrective = JSON.parse(Buffer.from(below.headers.get('payment-required')!, 'base64').toString())
    expect(corrective.error).toBe('invalid_batch_settlement_evm_cumulative_below_claimed')
    expect(
      corrective.accepts.find((a: { scheme: string }) => a.scheme === 'batch-settlement').extra.channelState,
    ).toMatchObject({ chargedCumulativeAmount: (3n * PRICE).toString() })
    // Signed by someone else.
    const stranger = await fundedAccount(0n)
    await refusedWith(
      ep.metered_url,
      await voucherHeader(accepted, config, { cumulative: 4n * PRICE, signer: stranger }),
      'invalid_batch_settlement_evm_voucher_signature',
    )
    // The payer's own voucher with its signature's high-s twin: valid ECDSA, but the channel contract
    // refuses it, so its claim would revert. Refused here too.
    const good = JSON.parse(
      Buffer.from(
        await voucherHeader(accepted, config, { cumulative: 4n * PRICE, signer: who }),
        'base64',
      ).toString(),
    )
    const sig: string = good.payload.voucher.signature
    const N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n
    const highS = (N - BigInt(`0x${sig.slice(66, 130)}`)).toString(16).padStart(64, '0')
    const v = sig.slice(130) === '1b' ? '1c' : '1b'
    good.payload.voucher.signature = `${sig.slice(0, 66)}${highS}${v}`
    await refusedWith(
      ep.metered_url,
      Buffer.from(JSON.stringify(good)).toString('base64'),
      'invalid_batch_settlement_evm_voucher_signature',
    )
    // A voucher the payer signed for another channel, presented with this channel's config.
    const other = computeChannelId({ ...config, salt: `0x${'11'.repeat(32)}` }, caip2)
    await refusedWith(
      ep.metered_url,
      await voucherHeader(accepted, config, { cumulative: 4n * PRICE, signer: who, channelId: other }),
      'invalid_batch_settlement_evm_channel_id_mismatch',
    )
    // The 4th call exhausts the deposit; a 5th voucher is beyond it.
    expect((await pay(ep.metered_url)).status).toBe(200)
    await refusedWith(
      ep.metered_url,
      await voucherHeader(accepted, config, { cumulative: 5n * PRICE, signer: who }),
      'invalid_batch_settlement_evm_cumulative_exceeds_balance',
    )
    // The published client itself tops the channel up (a second deposit) and goes on.
    expect((await pay(ep.metered_url)).status).toBe(200)
  }, 120_000)
})

describe.runIf(usingServer)('two instances on one database', () => {
  let a: TestService
  let b: TestService
  beforeAll(async () => {
    const databaseUrl = await freshDatabaseUrl()
    a = await startTestService({ databaseUrl })
    b = await startTestService({ databaseUrl, treasury: a.treasury })
  })
  afterAll(async () => {
    await a?.stop()
    await b?.stop()
  })

  it("concurrent vouchers on one channel over both never serve past the channel's deposit, nor one increment twice", async () => {
    const owner = await registerMerchant(a)
    const created = await a.api('/api/v1/endpoints', {
      key: owner.key,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.001, batch_settlement: true },
    })
    const ep = created.body as { id: string }
    const who = await fundedAccount(100_000_000n)
    const url = (s: TestService) => `${s.url}/m/${ep.id}`
    // Deposit of 5 calls through instance a, 2 of them spent by the published client.
    const { fetch: pay, scheme } = payingFetch(who, 5)
    for (let i = 0; i < 2; i++) expect((await pay(url(a))).status).toBe(200)
    const probe = await fetch(url(b))
    const required = JSON.parse(Buffer.from(probe.headers.get('payment-required')!, 'base64').toString())
    const accepted = required.accepts.find((x: { scheme: string }) => x.scheme === 'batch-settlement')
    const config = scheme.buildChannelConfig(accepted) as ChannelConfig
    // Vouchers for cumulatives 3..8 calls, each sent 4 times at once, half to each instance, in rounds.
    const headers: string[] = []
    for (let n = 3n; n <= 8n; n++)
      headers.push(await voucherHeader(accepted, config, { cumulative: n * PRICE, signer: who }))
    const before = upstream.count()
    // Every answer, by round, instance and voucher: a failure shows which increment was served where.
    const answers: string[] = []
    for (let round = 0; round < 6; round++) {
      await Promise.all(
        headers.flatMap((h, i) =>
          [a, b, a, b].map((s) =>
            fetch(url(s), { headers: { 'payment-signature': h } }).then(async (r) => {
              const reason =
                r.status === 200 ? '' : JSON.stringify(((await r.json()) as { error?: unknown }).error)
              answers.push(`r${round} ${s === a ? 'a' : 'b'} n=${i + 3} ${r.status} ${reason}`)
            }),
          ),
        ),
      )
    }
    const served = answers.filter((x) => x.includes(' 200 '))
    // Exactly the 3 calls the deposit still covered, each increment once.
    const seen = { served: served.length, upstream: upstream.count() - before }
    expect(seen, answers.join('\n')).toEqual({ served: 3, upstream: 3 })
    // Vouchers are accepted in memory by the instance holding the channel's lease and written in batches.
    await a.flushCaptures()
    await b.flushCaptures()
    const [row] = await a.sql<{ charged_atomic: bigint; balance_atomic: bigint; lease_epoch: bigint }[]>`
      SELECT charged_atomic, balance_atomic, lease_epoch FROM batch_channels`
    expect(row).toMatchObject({ charged_atomic: 5n * PRICE, balance_atomic: 5n * PRICE })
    // The channel's lease changed hands between the instances (a held it for the first calls).
    expect(row!.lease_epoch).toBeGreaterThanOrEqual(2n)
    const [calls] = await a.sql<{ n: number }[]>`SELECT count(*)::int AS n FROM claims WHERE kind = 'batch'`
    expect(calls!.n).toBe(5)
  }, 120_000)
})
