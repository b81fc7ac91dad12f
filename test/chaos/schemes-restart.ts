// The charges measured after the call, through PostgreSQL restarts: x402 `upto` (the published UptoEvmScheme
// signs a fresh Permit2 permit per call, the ceiling above the charge) and batch-settlement channels (the
// published BatchSettlementEvmScheme, one voucher per call covering the ceiling, the channel charged the
// tokens measured, the client put right by the scheme's corrective 402). Both pay token-priced OpenAI-style
// streams from the chaos upstream (which counts what it served, per call) through two tollgate processes on
// one private PostgreSQL server, alternating instances; PostgreSQL is restarted while streams are in flight.
// Afterwards the leader settles (upto permits, channel claims) and every call is judged against what the
// upstream served, the books and the chain. One channel call in ten hangs upstream past the head timeout:
// it is charged in doubt (a call row of status 0 at its voucher's ceiling) and its client pays on.
import { writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { x402Client, x402HTTPClient } from '@x402/core/client'
import { UptoEvmScheme } from '@x402/evm/upto/client'
import postgres from 'postgres'
import {
  createPublicClient,
  createWalletClient,
  getAddress,
  type Hex,
  http,
  maxUint256,
  parseAbi,
} from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { readChannel } from '../../src/chain/batch-channel.ts'
import { PERMIT2_ADDRESS } from '../../src/chain/upto-permit.ts'
import { approvePermit2From, fundedSmartWallet } from '../chain/contracts/smart-wallet.ts'
import { postJson } from '../helpers/api.ts'
import { batchPayer } from '../helpers/batch-payer.ts'
import type { ChildService } from '../helpers/child-service.ts'
import { type CountingUpstream, STREAM_PROMPT_TOKENS, startCountingUpstream } from './counting-upstream.ts'
import {
  balancesAgainstEntries,
  merchantEndpoint,
  runReconcile,
  startChaosWorld,
  startChildOn,
} from './harness.ts'

/** $1 / M input and $10 / M output tokens: 1 and 10 base units a token; the ceiling 1,000 base units. */
const CEILING_ATOMIC = 1_000n
const PRICING = {
  model: 'usage',
  unit: 'tokens',
  max_price: Number(CEILING_ATOMIC) / 1e6,
  input_price_per_million: 1,
  output_price_per_million: 10,
}
/** What a stream of `completion` output tokens costs (the prompt is always STREAM_PROMPT_TOKENS). */
export const tokenCharge = (completion: number) => BigInt(STREAM_PROMPT_TOKENS + completion * 10)

/** A call's client gives up on one attempt after this, and on the call after CALL_DEADLINE_MS. */
const ATTEMPT_TIMEOUT_MS = 15_000
const CALL_DEADLINE_MS = 30_000
/** Batch-settlement deposits cover this many ceilings: a channel never tops up during the run. */
const DEPOSIT_MULTIPLIER = 200
const PAYER_FUNDING_ATOMIC = 10_000_000n
/** The reasons of a batch-settlement 402 after which the published client pays the same call again. */
const BATCH_RETRY_REASONS = ['channel_busy', 'cumulative_amount_mismatch', 'cumulative_below_claimed']
/**
 * The reasons of an upto 402 after which a sponsored payer (eip2612GasSponsoring, no Permit2 approval) signs
 * again later: its previous permit, whose approval sets the allowance, is not settled yet (one at a time), or
 * was settled after the client read its EIP-2612 nonce, so the new approval names a nonce now spent.
 */
const SPONSORED_RETRY_REASONS = ['insufficient_funds', 'permit2_allowance_pending', 'eip2612_nonce_mismatch']

export type RestartMode = 'fast' | 'immediate'

export interface SchemesChaosOptions {
  /** New calls start for this long; calls started go on to their end. */
  loadMs: number
  /** Concurrent upto payers' calls (one payer, a fresh permit each). */
  uptoWorkers: number
  /**
   * Upto payers that never approved Permit2 (eip2612GasSponsoring: each permit carries an EIP-2612
   * approval, submitted at settlement), each paying its calls one after another.
   */
  sponsoredPayers: number
  /**
   * Upto payers that are contract wallets (ERC-1271: the wallet approved Permit2, its owner's key signs each
   * permit, tollgate and Permit2 ask the wallet), each paying its calls one after another.
   */
  smartWalletPayers?: number
  /** Channels (one payer each), each paying its calls one after another. */
  channels: number
  /** PostgreSQL restarts, spread over the load ('fast' as the chaos rounds do; 'immediate' is a crash). */
  restarts: RestartMode[]
  log(line: string): void
}

type Kind = 'upto' | 'batch'

interface Call {
  id: string
  kind: Kind
  /** Output tokens the upstream streams for it. */
  events: number
  outcome: 'served' | 'refused' | 'gave_up' | 'in_doubt' | null
  /** The upstream never answers it: the proxy's head timeout puts it in doubt (batch only). */
  hang: boolean
  /** upto paid by a payer without a Permit2 approval (eip2612GasSponsoring). */
  sponsored?: boolean
  /** upto paid by a contract wallet (ERC-1271). */
  smartWallet?: boolean
  /** The final 402's reason, for a refused call. */
  refused: string | null
  receiptId: string | null
  /** upto: the transaction its PAYMENT-RESPONSE said settled it before the answer (success: true), or null. */
  paidTx: string | null
  /** The usage chunk and [DONE] arrived. */
  whole: boolean
  /** Content events the client received on its served attempt. */
  deltas: number
  /** When the served attempt was sent and when its answer ended. */
  from: number
  to: number
  /** Payment headers sent for it (upto: its permit; batch: every voucher the client signed), for the replay. */
  headers: Array<Record<string, string>>
  trail: string[]
}

export interface KindFigures {
  calls: number
  /** Served by the upstream (head sent), once or more. */
  served: number
  servedTwice: number
  /** Served and received whole by the client (usage chunk and [DONE]). */
  whole: number
  /** Served, but the client's answer ended before [DONE]: what it received vs what it was charged is listed. */
  cut: number
  refused: number
  gaveUp: number
  /** Calls the client saw time out upstream (504), and the call rows booked for them in doubt (status 0). */
  inDoubt: number
  doubtRows: number
  /** Rows in doubt not charged their voucher's whole ceiling, or not as many as the calls in doubt. */
  doubtMismatch: number
  /** Served with no call row, or a zero charge: served unpaid. */
  servedUnpaid: number
  /** Call rows with no call the upstream served. */
  paidNotServed: number
  /** Whole calls whose call row's charge or output tokens differ from the tokens streamed. */
  chargeMismatch: number
  /** Whole calls whose stream ran across a restart (sent before it, ended after it). */
  acrossRestart: number
  /** Base units charged in all. */
  charged: bigint
  status503: number
  networkErrors: number
}

export interface UptoFigures extends KindFigures {
  /** Upto call rows whose claim settled for another amount than the charge, or above the signed maximum. */
  settledNotBooked: number
  overSigned: number
  /** Upto calls not settled when the wait ended. */
  unsettled: number
  /** Claims never captured (a permit claimed, not served): must not be settled for anything. */
  uncapturedSettled: number
  /** Served calls whose receipt said settled before the answer, and those of them whose claim names another
   * transaction or is not settled (a receipt naming a transaction that did not carry the permit). */
  settledBeforeAnswer: number
  receiptOtherTx: number
  /** What left the payers' wallets on chain, and the sum of the upto charges. */
  payerMovedAtomic: bigint
  /** Served calls of the sponsored payers, their permits settled with the approval, and the 402s that made
   * them sign again (the previous permit not settled yet). */
  sponsoredServed: number
  sponsoredSettled: number
  sponsoredWaits: number
  /** Served calls of the smart-wallet payers, and their permits settled. */
  smartWalletServed: number
  smartWalletSettled: number
}

export interface BatchFigures extends KindFigures {
  channels: number
  /** The scheme's corrective 402s both instances answered ("out of sync"): the client put right. */
  corrections: number
  /** Channels whose charged cumulative is not the sum of their call rows' charges. */
  chargedNotSum: number
  /** Channels not claimed for exactly their charge in the books, or on chain. */
  claimedNotCharged: number
  onChainNotCharged: number
}

export interface RestartFigures {
  mode: RestartMode
  atMs: number
  tookMs: number
  /** Streams in flight (either kind) when PostgreSQL went down. */
  streamsInFlight: number
}

export interface SchemesChaosResult {
  upto: UptoFigures
  batch: BatchFigures
  restarts: RestartFigures[]
  /** Every payment header sent again on both instances after the load: serves that caused (must be 0). */
  replaySends: number
  replayServed: number
  reconcileExit: number | null
  balancesChecked: number
  balanceDrift: number
  crashed: number
  crashOutput: string[]
  /** Calls that were cut, or suspicious: their attempts, for the report. */
  notes: string[]
  elapsedMs: number
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

interface Instance {
  name: string
  child: ChildService
}

export async function runSchemesChaos(options: SchemesChaosOptions): Promise<SchemesChaosResult> {
  const { log } = options
  const started = Date.now()
  const cleanups: Array<() => Promise<unknown>> = []
  try {
    const { cluster, chain, upstream } = await startChaosWorld(
      { payers: 1 + options.channels, payerFunding: PAYER_FUNDING_ATOMIC },
      startCountingUpstream,
      cleanups,
    )
    log(`cluster ${cluster.url}, anvil ${chain.rpcUrl}, upstream ${upstream.url}`)

    const settings = {
      // A head that has not come in a second puts the call in doubt (the hanging channel calls).
      proxy: { allow_private_upstreams: true, upstream_timeout_ms: 1_000 },
      chain: { poll_interval_ms: 200, rpc_timeout_ms: 2_000 },
      // The leader settles permits and claims channels while the load runs (restarts included), not only after.
      settlement: { interval_ms: 500, receipt_poll_ms: 100 },
      x402: { batch_claim_interval_ms: 1_000 },
      log: { level: 'warn' },
    }
    const start = () => startChildOn(cluster, chain, settings)
    // Migrations run under an advisory lock: both start at once, one migrates, the other finds it done.
    const [childA, childB] = await Promise.all([start(), start()])
    const a: Instance = { name: 'a', child: childA }
    const b: Instance = { name: 'b', child: childB }
    const instances = [a, b]
    let stopping = false
    let crashed = 0
    const crashOutput: string[] = []
    for (const inst of instances) {
      inst.child.exited.then((signal) => {
        if (stopping) return
        crashed++
        crashOutput.push(
          `${inst.name} (pid ${inst.child.pid}, ${signal ?? 'exit'}):\n${inst.child.output().slice(-3000)}`,
        )
        log(`!! ${inst.name} exited (${signal ?? 'exit'})`)
      })
    }
    cleanups.push(async () => {
      stopping = true
      for (const inst of instances) await inst.child.kill('SIGTERM')
    })
    log(
      `instances up in ${Math.round((Date.now() - started) / 1000)} s: a pid ${a.child.pid}, b pid ${b.child.pid}`,
    )

    const { key, ep: uptoEp } = await merchantEndpoint(a.child.url, 'Schemes Chaos Co', {
      upstream_url: `${upstream.url}/v1/chat/completions`,
      pricing: PRICING,
    })
    const batchEp = await postJson(
      a.child.url,
      '/api/v1/endpoints',
      { upstream_url: `${upstream.url}/v1/chat/completions`, pricing: PRICING, batch_settlement: true },
      key,
    )
    const paths: Record<Kind, string> = { upto: `/m/${uptoEp.id}`, batch: `/m/${batchEp.id}` }

    const caip2 = `eip155:${chain.chainId}` as const
    const publicClient = createPublicClient({ transport: http(chain.rpcUrl) })
    const usdcAbi = parseAbi([
      'function approve(address spender, uint256 value) returns (bool)',
      'function transfer(address to, uint256 value) returns (bool)',
      'function balanceOf(address) view returns (uint256)',
    ])
    const uptoPayer = privateKeyToAccount(chain.payers[0]!.privateKey)
    // The payer approves Permit2 once, as the published client's createPermit2ApprovalTx asks.
    const approval = await createWalletClient({
      account: uptoPayer,
      transport: http(chain.rpcUrl),
    }).writeContract({
      address: chain.usdcAddress,
      abi: usdcAbi,
      functionName: 'approve',
      args: [PERMIT2_ADDRESS, maxUint256],
      chain: null,
    })
    await publicClient.waitForTransactionReceipt({ hash: approval })
    // Payers that never approve Permit2: funded by the upto payer, their approvals signed per permit.
    const sponsored = Array.from({ length: options.sponsoredPayers }, () =>
      privateKeyToAccount(generatePrivateKey()),
    )
    for (const s of sponsored) {
      const hash = await createWalletClient({
        account: uptoPayer,
        transport: http(chain.rpcUrl),
      }).writeContract({
        address: chain.usdcAddress,
        abi: usdcAbi,
        functionName: 'transfer',
        args: [s.address, 200_000n],
        chain: null,
      })
      await publicClient.waitForTransactionReceipt({ hash })
    }
    // Contract wallets (ERC-1271) owned by fresh keys: deployed and funded by the upto payer, each approving
    // Permit2 by a call of its own (the node sends it from the wallet's address).
    const smartWallets: Array<{ address: Hex; owner: ReturnType<typeof privateKeyToAccount> }> = []
    for (let i = 0; i < (options.smartWalletPayers ?? 0); i++) {
      const { wallet, owner } = await fundedSmartWallet({
        rpcUrl: chain.rpcUrl,
        usdc: chain.usdcAddress,
        funderKey: chain.payers[0]!.privateKey,
        amountAtomic: 200_000n,
      })
      const address = getAddress(wallet)
      await approvePermit2From({ rpcUrl: chain.rpcUrl, usdc: chain.usdcAddress, wallet: address })
      smartWallets.push({ address, owner })
    }
    const uptoBalance = async () => {
      let sum = 0n
      for (const owner of [uptoPayer, ...sponsored, ...smartWallets])
        sum += await publicClient.readContract({
          address: chain.usdcAddress,
          abi: usdcAbi,
          functionName: 'balanceOf',
          args: [owner.address],
        })
      return sum
    }
    const uptoBalanceBefore = await uptoBalance()
    const sponsoredClients = sponsored.map(
      (account) =>
        new x402HTTPClient(
          x402Client.fromConfig({
            // With an RPC, the published client reads its allowance and signs the EIP-2612 approval.
            schemes: [{ network: caip2, client: new UptoEvmScheme(account, { rpcUrl: chain.rpcUrl }) }],
            spendControls: { allowedAssets: [{ network: caip2, asset: chain.usdcAddress }] },
          }),
        ),
    )
    const smartWalletClients = smartWallets.map(
      (w) =>
        new x402HTTPClient(
          x402Client.fromConfig({
            // The wallet's address pays; its owner's key signs what the wallet's isValidSignature accepts.
            schemes: [
              {
                network: caip2,
                client: new UptoEvmScheme({
                  address: w.address,
                  signTypedData: (m: never) => w.owner.signTypedData(m),
                } as never),
              },
            ],
            spendControls: { allowedAssets: [{ network: caip2, asset: chain.usdcAddress }] },
          }),
        ),
    )
    const uptoClient = new x402HTTPClient(
      x402Client.fromConfig({
        schemes: [{ network: caip2, client: new UptoEvmScheme(uptoPayer) }],
        // The test USDC is not one of the package's default assets: allowed, as a payer would.
        spendControls: { allowedAssets: [{ network: caip2, asset: chain.usdcAddress }] },
      }),
    )
    const channelPayers = chain.payers.slice(1).map((p) => {
      const account = privateKeyToAccount(p.privateKey)
      return batchPayer(
        { account, privateKey: p.privateKey, address: account.address },
        {
          caip2,
          depositMultiplier: DEPOSIT_MULTIPLIER,
          chain: { rpcUrl: chain.rpcUrl, usdc: chain.usdcAddress },
        },
      )
    })

    // The load: upto workers and one sequential payer per channel, alternating instances per attempt.
    const calls: Call[] = []
    let seq = 0
    // Counted per kind: on the shared sequence, whether a channel call drew a hanging number depended on how
    // the upto calls interleaved (a CI run on a slow machine had 16 channel calls and none hung).
    let channelCalls = 0
    const newCall = (kind: Kind): Call => {
      const n = seq++
      const nthChannelCall = kind === 'batch' ? channelCalls++ : -1
      const call: Call = {
        id: `${kind === 'upto' ? 'u' : 'b'}${n}`,
        kind,
        // 15 to 45 output tokens, 40 ms apart: 0.6 to 1.8 s of stream, so a restart lands mid-stream.
        events: 15 + ((n * 7) % 31),
        outcome: null,
        // One channel call in ten hangs upstream: charged in doubt, never served, the client pays on.
        hang: nthChannelCall % 10 === 5,
        refused: null,
        receiptId: null,
        paidTx: null,
        whole: false,
        deltas: 0,
        from: 0,
        to: 0,
        headers: [],
        trail: [],
      }
      calls.push(call)
      return call
    }
    const t0 = Date.now()
    const loadEnd = t0 + options.loadMs
    const stats = { upto503: 0, batch503: 0, uptoNet: 0, batchNet: 0, sponsoredWaits: 0 }
    const url = (inst: Instance, c: Call, hang = c.hang) =>
      `${inst.child.url}${paths[c.kind]}?p=${c.id}&n=${c.events}${hang ? '&hang=1' : ''}`

    const uptoWorker = async (w: number) => {
      while (Date.now() < loadEnd) {
        const c = newCall('upto')
        await payUpto(c, w, { instances, url, client: uptoClient, stats, t0 })
      }
    }
    const sponsoredWorker = async (i: number) => {
      while (Date.now() < loadEnd) {
        const c = newCall('upto')
        c.sponsored = true
        await payUpto(c, options.uptoWorkers + i, {
          instances,
          url,
          client: sponsoredClients[i]!,
          stats,
          t0,
          retryReasons: SPONSORED_RETRY_REASONS,
        })
      }
    }
    const smartWalletWorker = async (i: number) => {
      while (Date.now() < loadEnd) {
        const c = newCall('upto')
        c.smartWallet = true
        await payUpto(c, options.uptoWorkers + options.sponsoredPayers + i, {
          instances,
          url,
          client: smartWalletClients[i]!,
          stats,
          t0,
        })
      }
    }
    const channelWorker = async (i: number) => {
      const payer = channelPayers[i]!
      while (Date.now() < loadEnd) {
        const c = newCall('batch')
        await payBatch(c, i, { instances, url, payer, stats, t0 })
      }
    }
    const restarts: RestartFigures[] = []
    const restarting = (async () => {
      for (const [k, mode] of options.restarts.entries()) {
        // Spread over the load, the first after a quarter of it: streams of both kinds are in flight.
        const at = t0 + (options.loadMs * (k + 1)) / (options.restarts.length + 1)
        if (at > Date.now()) await sleep(at - Date.now())
        // And only once a stream is being served: on a slow machine the clients may still be backing off
        // from the restart before (CI saw one land on none at 10 s of 15), which proves nothing mid-stream.
        while (upstream.streaming() === 0 && Date.now() < loadEnd - 2_000) await sleep(10)
        const down = Date.now()
        await cluster.restart(mode, 1_000)
        restarts.push({ mode, atMs: down - t0, tookMs: Date.now() - down, streamsInFlight: 0 })
        log(
          `   PostgreSQL restarted (${mode}, 1 s down) at ${down - t0} ms (${new Date(down).toISOString()}) in ${Date.now() - down} ms`,
        )
      }
    })()
    await Promise.all([
      ...Array.from({ length: options.uptoWorkers }, (_, w) => uptoWorker(w)),
      ...Array.from({ length: options.sponsoredPayers }, (_, i) => sponsoredWorker(i)),
      ...smartWallets.map((_, i) => smartWalletWorker(i)),
      ...Array.from({ length: options.channels }, (_, i) => channelWorker(i)),
      restarting,
    ])
    log(`load done in ${Math.round((Date.now() - t0) / 1000)} s: ${calls.length} calls`)

    // Every payment header of a served or refused call once more on both instances: a spent permit or
    // voucher never serves again. (A call that gave up may hold a permit never claimed: that one would.)
    const servedBefore = new Map(upstream.served)
    let replaySends = 0
    // A call in doubt's vouchers too, to an upstream that answers: served, it would be counted.
    for (const c of calls.filter((x) => x.outcome !== 'gave_up' && x.outcome !== null))
      for (const h of c.headers)
        for (const inst of instances) {
          replaySends++
          await fetch(url(inst, c, false), { method: 'POST', headers: { ...h, ...JSON_HEADERS }, body: BODY })
            .then((r) => r.text())
            .catch(() => {})
        }
    let replayServed = 0
    for (const [id, n] of upstream.served) replayServed += n - (servedBefore.get(id) ?? 0)

    const db = postgres(cluster.url, { max: 2, onnotice: () => {} })
    cleanups.push(() => db.end({ timeout: 1 }))
    // Settlement: every upto call settled and every channel claimed for its charge (the leader's jobs run
    // every 0.5 s and 1 s); bounded, and whatever is left is counted, not awaited forever.
    const servedCount = (k: Kind) =>
      calls.filter((c) => c.kind === k && (upstream.served.get(c.id) ?? 0) > 0).length
    const settleBy = Date.now() + 30_000
    for (;;) {
      const [s] = await db<
        { upto_calls: number; upto_open: number; batch_calls: number; channels_open: number }[]
      >`
        SELECT
          (SELECT count(*)::int FROM calls WHERE endpoint_id = ${uptoEp.id}) AS upto_calls,
          (SELECT count(*)::int FROM claims k JOIN calls c ON call_proof_key(c.proof_key, c.proof) = k.proof_key
            WHERE k.kind = 'upto' AND k.settled_at IS NULL) AS upto_open,
          (SELECT count(*)::int FROM calls WHERE endpoint_id = ${batchEp.id}) AS batch_calls,
          (SELECT count(*)::int FROM batch_channels
            WHERE claimed_atomic <> charged_atomic OR lease_holder IS NOT NULL) AS channels_open`.catch(
        () => [{ upto_calls: -1, upto_open: -1, batch_calls: -1, channels_open: -1 }],
      )
      const done =
        s!.upto_calls >= servedCount('upto') &&
        s!.upto_open === 0 &&
        s!.batch_calls >= servedCount('batch') &&
        s!.channels_open === 0
      if (done || Date.now() > settleBy) {
        log(
          `settled ${done ? 'all' : 'NOT all'} in ${Date.now() - (settleBy - 30_000)} ms: ${JSON.stringify(s)}`,
        )
        break
      }
      await sleep(250)
    }

    const upto = await judgeUpto(
      db,
      calls,
      upstream,
      uptoEp.id as string,
      smartWallets.map((w) => w.address),
    )
    upto.payerMovedAtomic = uptoBalanceBefore - (await uptoBalance())
    upto.status503 = stats.upto503
    upto.sponsoredWaits = stats.sponsoredWaits
    upto.networkErrors = stats.uptoNet
    const batch = await judgeBatch(db, calls, upstream, batchEp.id as string, publicClient)
    batch.channels = options.channels
    batch.status503 = stats.batch503
    batch.networkErrors = stats.batchNet
    batch.corrections = (await Promise.all(instances.map((i) => corrections(i.child)))).reduce(
      (n, x) => n + x,
      0,
    )
    for (const r of restarts)
      r.streamsInFlight = calls.filter(
        (c) => c.outcome === 'served' && c.from < t0 + r.atMs && c.to > t0 + r.atMs,
      ).length
    for (const kind of ['upto', 'batch'] as const) {
      const f = kind === 'upto' ? upto : batch
      f.acrossRestart = calls.filter(
        (c) => c.kind === kind && c.whole && restarts.some((r) => c.from < t0 + r.atMs && c.to > t0 + r.atMs),
      ).length
    }

    // An upto claim left unsettled: its state, and both instances' output, for the post-mortem.
    const openUpto = await db<Record<string, unknown>[]>`
      SELECT k.proof_key, k.status, k.settlement_tx, k.settlement_error, k.attempts, k.releases,
             k.authorization_payload ? 'permit2612' AS sponsored, k.claimed_at, k.captured_at
      FROM claims k JOIN calls c ON call_proof_key(c.proof_key, c.proof) = k.proof_key
      WHERE k.kind = 'upto' AND k.settled_at IS NULL`.catch(() => [])
    const openNotes: string[] = openUpto.map((r) => `upto unsettled: ${JSON.stringify(r)}`)
    if (openUpto.length > 0)
      for (const inst of instances) {
        const file = join(tmpdir(), `schemes-chaos-${inst.name}-${inst.child.pid}.log`)
        writeFileSync(file, inst.child.output())
        openNotes.push(`${inst.name}: output in ${file}`)
      }

    const reconcileExit = await runReconcile(cluster.url, chain, log)
    const balances = await balancesAgainstEntries(cluster.url)
    const notes = [...openNotes, ...(await explain(db, calls, upstream))]
    // What the instances logged as errors: jobs and requests failing while the server is down are
    // expected (counted); served calls not written because their lease was taken over are the finding.
    for (const inst of instances) {
      const errors = inst.child
        .output()
        .split('\n')
        .filter((l) => l.includes('"level":"error"'))
      notes.push(`${inst.name}: ${errors.length} error lines`)
      const lost = errors.filter((l) => /taken over/.test(l))
      for (const line of lost.slice(0, 10)) notes.push(`${inst.name}: ${line.slice(0, 600)}`)
      if (lost.length > 0) {
        // The whole output of an instance that lost calls, for the post-mortem.
        const file = join(tmpdir(), `schemes-chaos-${inst.name}-${inst.child.pid}.log`)
        writeFileSync(file, inst.child.output())
        notes.push(`${inst.name}: output in ${file}`)
      }
    }
    return {
      upto,
      batch,
      restarts,
      replaySends,
      replayServed,
      reconcileExit,
      balancesChecked: balances.checked,
      balanceDrift: balances.drifted,
      crashed,
      crashOutput,
      notes,
      elapsedMs: Date.now() - started,
    }
  } finally {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => {})
  }
}

const JSON_HEADERS = { 'content-type': 'application/json' }
const BODY = JSON.stringify({
  model: 'chaos',
  stream: true,
  stream_options: { include_usage: true },
  messages: [{ role: 'user', content: 'count' }],
})

interface Streamed {
  status: number
  reason: string | null
  receiptId: string | null
  paidTx: string | null
  whole: boolean
  deltas: number
  usage: { prompt: number; completion: number } | null
}

/** The transaction a PAYMENT-RESPONSE says settled the payment (success: true), else null. */
function settledTx(header: string | null): string | null {
  if (header === null) return null
  try {
    const r = JSON.parse(Buffer.from(header, 'base64').toString()) as {
      success?: boolean
      transaction?: string
    }
    return r.success === true && r.transaction ? r.transaction : null
  } catch {
    return null
  }
}

/** Reads one answer to its end: the 402 reason, or the stream's content events, usage chunk and [DONE]. */
async function readAnswer(res: Response): Promise<Streamed> {
  const out: Streamed = {
    status: res.status,
    reason: null,
    receiptId: res.headers.get('x-receipt-id'),
    paidTx: settledTx(res.headers.get('payment-response')),
    whole: false,
    deltas: 0,
    usage: null,
  }
  if (res.status === 402) {
    const header = res.headers.get('payment-required')
    const body = await res.text()
    try {
      out.reason = header
        ? ((JSON.parse(Buffer.from(header, 'base64').toString()) as { error?: string }).error ?? null)
        : ((JSON.parse(body) as { error?: string }).error ?? null)
    } catch {
      out.reason = 'unreadable'
    }
    return out
  }
  let text = ''
  try {
    text = await res.text()
  } catch {
    // The answer broke off: what arrived before is judged below (nothing of it, here).
  }
  if (res.status >= 300) return out
  for (const event of text.split('\n\n')) {
    if (event === 'data: [DONE]') out.whole = out.usage !== null
    if (!event.startsWith('data: {')) continue
    const chunk = JSON.parse(event.slice(6)) as {
      choices: Array<{ delta?: { content?: string } }>
      usage?: { prompt_tokens: number; completion_tokens: number } | null
    }
    if (chunk.choices[0]?.delta?.content) out.deltas++
    if (chunk.usage)
      out.usage = { prompt: chunk.usage.prompt_tokens, completion: chunk.usage.completion_tokens }
  }
  return out
}

interface DriveCtx {
  instances: Instance[]
  url(inst: Instance, c: Call): string
  stats: { upto503: number; batch503: number; uptoNet: number; batchNet: number; sponsoredWaits: number }
  t0: number
}

/** Records a served answer on its call. */
function served(c: Call, got: Streamed, from: number): void {
  c.outcome = 'served'
  c.receiptId = got.receiptId
  c.paidTx = got.paidTx
  c.whole = got.whole && got.usage?.completion === c.events && got.usage.prompt === STREAM_PROMPT_TOKENS
  c.deltas = got.deltas
  c.from = from
  c.to = Date.now()
}

/**
 * One upto call: the 402 of an instance, a fresh permit from the published client for its terms, then that
 * permit until it is served or refused (402), retried after a 503, a 409 or a network error on the other
 * instance (a permit serves at most once, whichever instance answers).
 */
async function payUpto(
  c: Call,
  w: number,
  ctx: DriveCtx & { client: x402HTTPClient; retryReasons?: string[] },
): Promise<void> {
  const deadline = Date.now() + CALL_DEADLINE_MS
  let header: Record<string, string> | null = null
  for (let attempt = 0; c.outcome === null; attempt++) {
    if (Date.now() > deadline) {
      c.outcome = 'gave_up'
      break
    }
    const inst = ctx.instances[(w + attempt) % ctx.instances.length]!
    const at = Date.now()
    try {
      if (header === null) {
        const r = await fetch(ctx.url(inst, c), {
          method: 'POST',
          headers: JSON_HEADERS,
          body: BODY,
          signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
        })
        const body = await r.json().catch(() => null)
        c.trail.push(`${inst.name}:unpaid ${r.status}@${at - ctx.t0}`)
        if (r.status === 402) {
          const required = ctx.client.getPaymentRequiredResponse((name) => r.headers.get(name), body)
          header = ctx.client.encodePaymentSignatureHeader(await ctx.client.createPaymentPayload(required))
          c.headers.push(header)
          continue
        }
        if (r.status === 503) ctx.stats.upto503++
      } else {
        const res = await fetch(ctx.url(inst, c), {
          method: 'POST',
          headers: { ...JSON_HEADERS, ...header },
          body: BODY,
          signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
        })
        const got = await readAnswer(res)
        c.trail.push(`${inst.name}:${got.status}${got.reason ? ` ${got.reason}` : ''}@${at - ctx.t0}`)
        if (got.status < 300) served(c, got, at)
        else if (got.status === 402 && ctx.retryReasons?.includes(got.reason ?? '')) {
          // Its previous permit is not settled yet: a fresh 402 and a new signature, after a wait.
          ctx.stats.sponsoredWaits++
          header = null
          await sleep(400)
        } else if (got.status === 402) {
          c.outcome = 'refused'
          c.refused = got.reason
        } else if (got.status === 503) ctx.stats.upto503++
      }
    } catch (err) {
      c.trail.push(
        `${inst.name}:${(err as Error).name === 'TimeoutError' ? 'timeout' : 'net'}@${at - ctx.t0}`,
      )
      ctx.stats.uptoNet++
    }
    // A retrying client's back-off.
    if (c.outcome === null) await sleep(100 + Math.random() * 100)
  }
}

/**
 * One batch-settlement call through the published client (@x402/fetch around BatchSettlementEvmScheme): it
 * reads the 402, signs a voucher for charged + ceiling, and after the corrective 402 (the previous call was
 * charged less than its ceiling) signs again from the channel's state. Retried on the other instance after a
 * 503, a busy channel (the lease moving between instances), or a network error.
 */
async function payBatch(
  c: Call,
  i: number,
  ctx: DriveCtx & { payer: ReturnType<typeof batchPayer> },
): Promise<void> {
  const deadline = Date.now() + CALL_DEADLINE_MS
  for (let attempt = 0; c.outcome === null; attempt++) {
    if (Date.now() > deadline) {
      c.outcome = 'gave_up'
      break
    }
    const inst = ctx.instances[(i + c.events + attempt) % ctx.instances.length]!
    const at = Date.now()
    const sentBefore = ctx.payer.sent.length
    try {
      const res = await ctx.payer.fetch(ctx.url(inst, c), {
        method: 'POST',
        headers: JSON_HEADERS,
        body: BODY,
        signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
      })
      const got = await readAnswer(res)
      c.trail.push(`ch${i} ${inst.name}:${got.status}${got.reason ? ` ${got.reason}` : ''}@${at - ctx.t0}`)
      if (got.status < 300) served(c, got, at)
      else if (got.status === 504 && c.hang) c.outcome = 'in_doubt'
      else if (got.status === 402 && !BATCH_RETRY_REASONS.some((r) => got.reason?.includes(r))) {
        c.outcome = 'refused'
        c.refused = got.reason
      } else if (got.status === 503) ctx.stats.batch503++
    } catch (err) {
      c.trail.push(
        `${inst.name}:${(err as Error).name === 'TimeoutError' ? 'timeout' : 'net'}@${at - ctx.t0}`,
      )
      ctx.stats.batchNet++
    }
    for (const h of ctx.payer.sent.slice(sentBefore)) c.headers.push({ 'payment-signature': h })
    if (c.outcome === null) await sleep(100 + Math.random() * 100)
  }
}

function kindFigures(calls: Call[], upstream: CountingUpstream): KindFigures {
  return {
    calls: calls.length,
    served: calls.filter((c) => (upstream.served.get(c.id) ?? 0) > 0).length,
    servedTwice: calls.filter((c) => (upstream.served.get(c.id) ?? 0) > 1).length,
    whole: calls.filter((c) => c.whole).length,
    cut: calls.filter((c) => c.outcome === 'served' && !c.whole).length,
    refused: calls.filter((c) => c.outcome === 'refused').length,
    gaveUp: calls.filter((c) => c.outcome === 'gave_up').length,
    inDoubt: calls.filter((c) => c.outcome === 'in_doubt').length,
    doubtRows: 0,
    doubtMismatch: 0,
    servedUnpaid: 0,
    paidNotServed: 0,
    chargeMismatch: 0,
    acrossRestart: 0,
    charged: 0n,
    status503: 0,
    networkErrors: 0,
  }
}

interface CallRow {
  receipt_id: string | null
  proof_key: string
  amount_atomic: string
  ceiling_atomic: string | null
  output_tokens: number | null
  input_tokens: number | null
  upstream_status: number
}

async function callRows(db: postgres.Sql, endpointId: string): Promise<CallRow[]> {
  return db<CallRow[]>`
    SELECT call_receipt_id(id, receipt_id) AS receipt_id, call_proof_key(proof_key, proof) AS proof_key,
           amount_atomic::text, ceiling_atomic::text,
           (usage -> 'quantities' ->> 'output_tokens')::int AS output_tokens,
           (usage -> 'quantities' ->> 'input_tokens')::int AS input_tokens, upstream_status
    FROM calls WHERE endpoint_id = ${endpointId}`
}

/**
 * The per-call columns both kinds share: served at most once, none served unpaid (each served call has its
 * call row, found by the receipt its client got), and each whole call charged exactly its tokens.
 */
function judgeCalls(
  f: KindFigures,
  calls: Call[],
  all: CallRow[],
  upstream: CountingUpstream,
): Map<string, CallRow> {
  // Rows in doubt (status 0) stand for calls the upstream never answered: charged, not served.
  const doubts = all.filter((r) => r.upstream_status === 0)
  f.doubtRows = doubts.length
  f.doubtMismatch =
    Math.abs(doubts.length - f.inDoubt) +
    doubts.filter((r) => BigInt(r.amount_atomic) !== CEILING_ATOMIC).length
  for (const r of doubts) f.charged += BigInt(r.amount_atomic)
  const rows = all.filter((r) => r.upstream_status !== 0)
  const byReceipt = new Map(rows.filter((r) => r.receipt_id).map((r) => [r.receipt_id!, r]))
  const servedIds = calls.filter((c) => (upstream.served.get(c.id) ?? 0) > 0)
  // A served call whose client never saw its receipt cannot be matched by it: the counts must still agree.
  const unmatched = servedIds.filter((c) => c.receiptId === null || !byReceipt.has(c.receiptId)).length
  f.servedUnpaid = Math.max(unmatched, servedIds.length - rows.length, 0)
  f.paidNotServed = Math.max(0, rows.length - servedIds.length)
  for (const r of rows) {
    f.charged += BigInt(r.amount_atomic)
    if (BigInt(r.amount_atomic) === 0n) f.servedUnpaid++
  }
  for (const c of calls) {
    if (!c.whole) continue
    const row = c.receiptId ? byReceipt.get(c.receiptId) : undefined
    if (
      !row ||
      BigInt(row.amount_atomic) !== tokenCharge(c.events) ||
      row.output_tokens !== c.events ||
      row.input_tokens !== STREAM_PROMPT_TOKENS ||
      row.ceiling_atomic !== String(CEILING_ATOMIC)
    )
      f.chargeMismatch++
  }
  return byReceipt
}

async function judgeUpto(
  db: postgres.Sql,
  all: Call[],
  upstream: CountingUpstream,
  endpointId: string,
  smartWallets: string[],
): Promise<UptoFigures> {
  const calls = all.filter((c) => c.kind === 'upto')
  const wallets = new Set(smartWallets.map((w) => w.toLowerCase()))
  const rows = await callRows(db, endpointId)
  const f: UptoFigures = {
    ...kindFigures(calls, upstream),
    settledNotBooked: 0,
    overSigned: 0,
    unsettled: 0,
    uncapturedSettled: 0,
    settledBeforeAnswer: 0,
    receiptOtherTx: 0,
    payerMovedAtomic: 0n,
    sponsoredServed: calls.filter((c) => c.sponsored && c.outcome === 'served').length,
    sponsoredSettled: 0,
    sponsoredWaits: 0,
    smartWalletServed: calls.filter((c) => c.smartWallet && c.outcome === 'served').length,
    smartWalletSettled: 0,
  }
  judgeCalls(f, calls, rows, upstream)
  const byCall = new Map<string, { tx: string | null; settled: boolean }>()
  for (const r of await db<{ id: string; tx: string | null; settled: boolean }[]>`
    SELECT c.id, k.settlement_tx AS tx, k.settled_at IS NOT NULL AS settled
    FROM calls c JOIN claims k ON k.proof_key = call_proof_key(c.proof_key, c.proof) WHERE k.kind = 'upto'`)
    byCall.set(r.id, { tx: r.tx, settled: r.settled })
  for (const c of calls) {
    if (c.paidTx === null || c.receiptId === null) continue
    f.settledBeforeAnswer++
    const k = byCall.get(`call_${c.receiptId.slice(5)}`)
    if (k === undefined || !k.settled || k.tx?.toLowerCase() !== c.paidTx.toLowerCase()) f.receiptOtherTx++
  }
  const claims = await db<
    {
      proof_key: string
      signed: string
      settled: string | null
      settled_at: Date | null
      charge: string | null
      sponsored: boolean
      payer: string
    }[]
  >`
    SELECT k.proof_key, k.amount_atomic::text AS signed, k.settled_atomic::text AS settled, k.settled_at,
           c.amount_atomic::text AS charge, k.authorization_payload ? 'permit2612' AS sponsored,
           lower(k.payer) AS payer
    FROM claims k LEFT JOIN calls c ON call_proof_key(c.proof_key, c.proof) = k.proof_key WHERE k.kind = 'upto'`
  for (const k of claims) {
    if (k.sponsored && k.charge !== null && k.settled_at !== null) f.sponsoredSettled++
    if (wallets.has(k.payer) && k.charge !== null && k.settled_at !== null) f.smartWalletSettled++
    if (k.charge === null) {
      // A permit claimed, never served: nothing may leave the payer's wallet for it.
      if (k.settled !== null && k.settled !== '0') f.uncapturedSettled++
      continue
    }
    if (BigInt(k.charge) > BigInt(k.signed) || BigInt(k.signed) !== CEILING_ATOMIC) f.overSigned++
    if (k.settled_at === null) f.unsettled++
    else if (k.settled !== k.charge) f.settledNotBooked++
  }
  return f
}

async function judgeBatch(
  db: postgres.Sql,
  all: Call[],
  upstream: CountingUpstream,
  endpointId: string,
  publicClient: ReturnType<typeof createPublicClient>,
): Promise<BatchFigures> {
  const calls = all.filter((c) => c.kind === 'batch')
  const rows = await callRows(db, endpointId)
  const f: BatchFigures = {
    ...kindFigures(calls, upstream),
    channels: 0,
    corrections: 0,
    chargedNotSum: 0,
    claimedNotCharged: 0,
    onChainNotCharged: 0,
  }
  judgeCalls(f, calls, rows, upstream)
  const sums = new Map<string, bigint>()
  for (const r of rows) {
    const channel = r.proof_key.split(':')[1]!
    sums.set(channel, (sums.get(channel) ?? 0n) + BigInt(r.amount_atomic))
  }
  const channels = await db<{ channel_id: string; charged: string; claimed: string }[]>`
    SELECT channel_id, charged_atomic::text AS charged, claimed_atomic::text AS claimed FROM batch_channels`
  for (const ch of channels) {
    const charged = BigInt(ch.charged)
    if (charged !== (sums.get(ch.channel_id) ?? 0n)) f.chargedNotSum++
    if (BigInt(ch.claimed) !== charged) f.claimedNotCharged++
    const onChain = await readChannel(publicClient as never, ch.channel_id as Hex)
    if (onChain.totalClaimed !== charged) f.onChainNotCharged++
  }
  return f
}

/** The corrective 402s an instance answered ("out of sync": the client resyncs and pays again). */
async function corrections(child: ChildService): Promise<number> {
  const text = await fetch(`${child.adminUrl}/metrics`).then(
    (r) => r.text(),
    () => '',
  )
  const line = text
    .split('\n')
    .find(
      (l) =>
        l.startsWith('tollgate_metered_payment_required_total{') && l.includes('cumulative_amount_mismatch'),
    )
  return line ? Number(line.split(' ').pop()) : 0
}

/** Calls cut short, served twice, or served without a call row: their attempts and what the books hold. */
async function explain(db: postgres.Sql, calls: Call[], upstream: CountingUpstream): Promise<string[]> {
  const notes: string[] = []
  for (const c of calls) {
    const n = upstream.served.get(c.id) ?? 0
    const cut = c.outcome === 'served' && !c.whole
    // A call refused for good: why, and what it went through.
    if (c.outcome === 'refused' || c.outcome === 'gave_up')
      notes.push(
        `${c.id}${c.sponsored ? ' (sponsored)' : ''} ${c.outcome} ${c.refused ?? ''}: ${c.trail.join(' ')}`,
      )
    if (n === 0 || (n === 1 && c.outcome === 'served' && !cut && c.receiptId === null)) continue
    const [row] = c.receiptId
      ? await db`SELECT amount_atomic::text, usage FROM calls WHERE call_receipt_id(id, receipt_id) = ${c.receiptId}`
      : [null]
    if (n === 1 && c.outcome === 'served' && !cut && row) continue
    notes.push(
      `${c.id} (${c.events} tokens) served ${n}×, client ${c.outcome}${cut ? ` cut after ${c.deltas} events` : ''}: ${c.trail.join(' ')} | call ${JSON.stringify(row ?? null)}`,
    )
  }
  return notes
}

export function formatSchemes(r: SchemesChaosResult): string {
  const k = (name: string, f: KindFigures) =>
    `${name}: ${f.calls} calls, ${f.served} served (${f.whole} whole, ${f.cut} cut, ${f.acrossRestart} across a restart), ` +
    `served twice ${f.servedTwice}, served unpaid ${f.servedUnpaid}, paid not served ${f.paidNotServed}, ` +
    `charge ≠ tokens ${f.chargeMismatch}, refused ${f.refused}, gave up ${f.gaveUp}, ` +
    `in doubt ${f.inDoubt} (${f.doubtRows} booked, ${f.doubtMismatch} off), ${f.status503} 503s, ` +
    `${f.networkErrors} network errors, ${f.charged} base units charged`
  return [
    `restarts: ${r.restarts.map((x) => `${x.mode} at ${x.atMs} ms (${x.tookMs} ms, ${x.streamsInFlight} streams in flight)`).join('; ')}`,
    k('upto', r.upto),
    `  upto settlement: settled ≠ booked ${r.upto.settledNotBooked}, above signed ${r.upto.overSigned}, unsettled ${r.upto.unsettled}, uncaptured settled ${r.upto.uncapturedSettled}; settled before the answer ${r.upto.settledBeforeAnswer}, receipt naming another transaction ${r.upto.receiptOtherTx}; payer wallets moved ${r.upto.payerMovedAtomic} of ${r.upto.charged} charged`,
    `  upto without a Permit2 approval (eip2612GasSponsoring): served ${r.upto.sponsoredServed}, settled with the approval ${r.upto.sponsoredSettled}, signed again after a 402 while the previous was unsettled ${r.upto.sponsoredWaits}`,
    `  upto from a smart wallet (ERC-1271): served ${r.upto.smartWalletServed}, settled ${r.upto.smartWalletSettled}`,
    k('batch', r.batch),
    `  channels: ${r.batch.channels}, corrective 402s ${r.batch.corrections}, charged ≠ Σ calls ${r.batch.chargedNotSum}, claimed ≠ charged ${r.batch.claimedNotCharged} (on chain ${r.batch.onChainNotCharged})`,
    `replay of ${r.replaySends} payment headers: ${r.replayServed} served again`,
    `reconcile exit ${r.reconcileExit}, balance drift ${r.balanceDrift} of ${r.balancesChecked}, crashed ${r.crashed}, ${Math.round(r.elapsedMs / 1000)} s`,
    ...r.notes.map((n) => `  note: ${n}`),
  ].join('\n')
}
