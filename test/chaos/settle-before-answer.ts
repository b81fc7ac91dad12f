// x402 `exact` settled before the answer (the default) through a PostgreSQL crash restart and a SIGKILL of one
// instance's server process. Payers using the published v2 client (@x402/evm exact, a fresh authorization per
// call) pay a fixed-price endpoint through two tollgate processes on one private PostgreSQL server, alternating
// instances; a call that meets a 503 or a dropped connection sends the same authorization again on the other
// instance. Under load instance b's server PID is SIGKILLed (its PID checked gone; calls go on through a, whose
// leader finishes b's settlements), then PostgreSQL is restarted `immediate` (a crash with recovery).
// Judged against what the counting upstream served, what each client was told, and the chain's logs:
// authorizations settled twice, lost (captured, never used on chain once the leader's job is done), receipts
// naming a transaction that did not carry that authorization (its AuthorizationUsed and Transfer logs),
// calls a client got answered whose authorization never moved (served unpaid), reconcile.
// Two more workers pay from smart wallets not deployed yet (ERC-6492, their factory trusted), a wallet after
// another, so the transactions that settle them create them: through the kill and the crash too. Each wallet
// with an answered call must exist on chain after, and its money moves only by its authorizations.
import { x402Client } from '@x402/core/client'
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import { registerExactEvmScheme } from '@x402/evm/exact/client'
import postgres from 'postgres'
import { createPublicClient, type Hex, http, parseAbiItem } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import type { startDevChain } from '../../src/chain/dev-chain.ts'
import { counterfactualSmartWallet, smartWalletFactory } from '../chain/contracts/smart-wallet.ts'
import { type ChildService, pidAlive } from '../helpers/child-service.ts'
import { waitFor } from '../helpers/wait-for.ts'
import { startCountingUpstream } from './counting-upstream.ts'
import {
  balancesAgainstEntries,
  merchantEndpoint,
  runReconcile,
  startChaosWorld,
  startChildOn,
} from './harness.ts'
import type { startPgCluster } from './pg-cluster.ts'

const PRICE_ATOMIC = 1_000n
const PAYERS = 4
/** Smart wallets not deployed yet, and the workers paying from them (the next wallet each call). */
const COUNTERFACTUAL_WALLETS = 8
const COUNTERFACTUAL_WORKERS = 2
const CALL_DEADLINE_MS = 20_000
const ATTEMPT_TIMEOUT_MS = 10_000

const usedEvent = parseAbiItem('event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)')
const transferEvent = parseAbiItem('event Transfer(address indexed from, address indexed to, uint256 value)')

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

export interface SettleBeforeAnswerChaosOptions {
  /** New calls start for this long (calls started go on to their end). */
  loadMs: number
  /** The SIGKILL of b, then the PostgreSQL crash restart, ms into the load. */
  killAtMs: number
  crashAtMs: number
  log(line: string): void
}

interface Call {
  id: string
  payer: Hex
  nonce: Hex
  outcome: 'served' | 'refused' | 'gave_up'
  /** The receipts of every 2xx answer the client got (one, unless something is wrong). */
  receipts: Array<{ success: boolean; transaction: string; errorReason?: string }>
  /** An attempt was on b when it was killed. */
  killedInFlight: boolean
  trail: string[]
}

export interface SettleBeforeAnswerChaosResult {
  calls: number
  /** Calls the clients got a 2xx for; of them, receipts saying settled (success and a mined hash). */
  answered: number
  answeredSettled: number
  /** Receipts saying pending with a hash (sent, not mined within wait_ms), and without one. */
  answeredPendingWithHash: number
  answeredPendingNoHash: number
  refused: number
  gaveUp: number
  /** Calls with an attempt on b when it died; of them, served by the upstream and never answered to the client. */
  killedInFlight: number
  upstreamServedNotAnswered: number
  /** ... and of those, charged (captured before the kill; the bound of a process killed mid-answer). */
  upstreamServedNotAnsweredCharged: number
  /** Authorization (payer, nonce) used more than once on chain, or payer outflow ≠ its uses × price. */
  settledTwice: number
  /** Claims captured whose authorization the chain never used, once the leader's job is done. */
  lost: number
  /** Receipts naming a transaction that did not carry that authorization; `success: true` without one. */
  falseReceipts: number
  /** Claims whose recorded settlement transaction (the receipt URL's) did not carry their authorization. */
  falseRecorded: number
  /** Calls answered 2xx whose authorization never moved on chain. */
  servedUnpaid: number
  /** Authorizations used on chain for a call the upstream never served. */
  paidNotServed: number
  /** Calls the upstream served more than once. */
  servedTwice: number
  /** Calls answered from counterfactual wallets; wallets that paid and exist on chain, and that do not. */
  counterfactualAnswered: number
  counterfactualDeployed: number
  counterfactualMissing: number
  /** Settled by the slots' addresses (before the answer) vs by the treasury (the leader's job). */
  bySlots: number
  byTreasury: number
  kill: { pid: number; signal: string | null; pidGone: boolean }
  reconcileExit: number | null
  balanceDrift: number
  notes: string[]
}

interface Setup {
  cluster: Awaited<ReturnType<typeof startPgCluster>>
  chain: Awaited<ReturnType<typeof startDevChain>>
  upstream: Awaited<ReturnType<typeof startCountingUpstream>>
  instances: ChildService[]
  path: string
  factory: Hex
}

async function setUp(cleanups: Array<() => Promise<unknown>>): Promise<Setup> {
  const { cluster, chain, upstream } = await startChaosWorld(
    // One more account than the payers: it deploys the wallets' factory and funds them (not a payer: its
    // outflow is not authorizations).
    { payers: PAYERS + 1, payerFunding: 1_000_000_000n },
    startCountingUpstream,
    cleanups,
  )
  const factory = await smartWalletFactory({
    rpcUrl: chain.rpcUrl,
    funderKey: chain.payers[PAYERS]!.privateKey,
  })
  // The service's defaults: before_answer on, no endpoint choice. The leader settles what this path missed.
  const settings = {
    proxy: { allow_private_upstreams: true },
    x402: { eip6492_factories: [factory] },
    chain: { poll_interval_ms: 200, rpc_timeout_ms: 2_000 },
    settlement: { interval_ms: 500, receipt_poll_ms: 100 },
    log: { level: 'warn' },
  }
  const start = () => startChildOn(cluster, chain, settings)
  // One after the other: the first migrates; two cold starts at once on a loaded machine outran 60 s.
  const instances = [await start()]
  instances.push(await start())
  cleanups.push(async () => {
    for (const c of instances) await c.kill('SIGTERM')
  })
  const { ep } = await merchantEndpoint(instances[0]!.url, 'Settle Chaos Co', {
    upstream_url: `${upstream.url}/echo`,
    price: Number(PRICE_ATOMIC) / 1e6,
  })
  if (ep.x402_settlement !== 'before_answer') throw new Error(`endpoint settles ${ep.x402_settlement}`)
  return { cluster, chain, upstream, instances, path: `/m/${ep.id}`, factory }
}

export async function runSettleBeforeAnswerChaos(
  options: SettleBeforeAnswerChaosOptions,
): Promise<SettleBeforeAnswerChaosResult> {
  const { log } = options
  const cleanups: Array<() => Promise<unknown>> = []
  try {
    const s = await setUp(cleanups)
    const { cluster, chain, instances } = s
    const required = decodePaymentRequiredHeader(
      (await fetch(`${instances[0]!.url}${s.path}`)).headers.get('payment-required')!,
    )
    const clientOf = (signer: unknown) => {
      const client = new x402Client()
      registerExactEvmScheme(client, { signer: signer as never })
      // The dev chain's token is not one the published client knows by address.
      client.setSpendControls(false)
      return client
    }
    const clients = chain.payers.slice(0, PAYERS).map((p) => clientOf(privateKeyToAccount(p.privateKey)))
    const wallets: Hex[] = []
    const walletClients: x402Client[] = []
    for (let i = 0; i < COUNTERFACTUAL_WALLETS; i++) {
      const cf = await counterfactualSmartWallet({
        rpcUrl: chain.rpcUrl,
        usdc: chain.usdcAddress,
        funderKey: chain.payers[PAYERS]!.privateKey,
        amountAtomic: 1_000n * PRICE_ATOMIC,
        factory: s.factory,
      })
      wallets.push(cf.wallet)
      walletClients.push(clientOf(cf.signer))
    }
    let nextWallet = 0

    let bKilled = false
    let inFlightOnB = new Set<Call>()
    const calls: Call[] = []
    let n = 0
    const t0 = Date.now()
    const payOnce = async (w: number, client = clients[w % clients.length]!): Promise<Call> => {
      const payload = await client.createPaymentPayload(required as never)
      const auth = (payload.payload as { authorization: { from: Hex; nonce: Hex } }).authorization
      const header = Buffer.from(JSON.stringify(payload)).toString('base64')
      const call: Call = {
        id: `sba-${n++}`,
        payer: auth.from,
        nonce: auth.nonce,
        outcome: 'gave_up',
        receipts: [],
        killedInFlight: false,
        trail: [],
      }
      const deadline = Date.now() + CALL_DEADLINE_MS
      for (let k = w; Date.now() < deadline; k++) {
        const onB = !bKilled && k % 2 === 1
        const inst = instances[onB ? 1 : 0]!
        if (onB) inFlightOnB.add(call)
        const r = await fetch(`${inst.url}${s.path}?p=${call.id}`, {
          headers: { 'PAYMENT-SIGNATURE': header },
          signal: AbortSignal.timeout(ATTEMPT_TIMEOUT_MS),
        }).catch(() => null)
        if (r) await r.arrayBuffer().catch(() => {})
        inFlightOnB.delete(call)
        const status = r?.status ?? 0
        call.trail.push(`${onB ? 'b' : 'a'}:${status}@${Date.now() - t0}`)
        if (status >= 200 && status < 300) {
          const h = r!.headers.get('payment-response')
          call.receipts.push(h ? decodePaymentResponseHeader(h) : { success: false, transaction: '' })
          call.outcome = 'served'
          return call
        }
        if (status !== 503 && status !== 0) {
          call.outcome = 'refused'
          return call
        }
        // A restart or a dead instance costs a retry of the same authorization, never the call.
        await sleep(100 + Math.random() * 100)
      }
      return call
    }
    const loadEnds = t0 + options.loadMs
    const workers = Array.from({ length: PAYERS * 2 }, async (_, w) => {
      while (Date.now() < loadEnds) calls.push(await payOnce(w))
    })
    const walletWorkers = Array.from({ length: COUNTERFACTUAL_WORKERS }, async (_, w) => {
      while (Date.now() < loadEnds)
        calls.push(await payOnce(w, walletClients[nextWallet++ % walletClients.length]!))
    })
    const kill = { pid: instances[1]!.pid, signal: null as string | null, pidGone: false }
    const faults = (async () => {
      await sleep(options.killAtMs)
      const b = instances[1]!
      const caught = [...inFlightOnB]
      for (const c of caught) c.killedInFlight = true
      log(`SIGKILL b pid ${b.pid} at ${Date.now() - t0} ms (${caught.length} calls in flight on b)`)
      bKilled = true
      process.kill(b.pid, 'SIGKILL')
      kill.signal = await b.exited
      kill.pidGone = !pidAlive(b.pid)
      inFlightOnB = new Set()
      await sleep(Math.max(0, t0 + options.crashAtMs - Date.now()))
      log(`pg restart immediate at ${Date.now() - t0} ms`)
      await cluster.restart('immediate')
      log(`pg back at ${Date.now() - t0} ms`)
    })()
    await Promise.all([...workers, ...walletWorkers, faults])
    log(`load done: ${calls.length} calls in ${Date.now() - t0} ms`)
    return await judge(s, calls, kill, log, wallets)
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => {})
  }
}

/** Waits for the leader to finish, then counts against the chain, the upstream and the books. */
async function judge(
  s: Setup,
  calls: Call[],
  kill: SettleBeforeAnswerChaosResult['kill'],
  log: (line: string) => void,
  wallets: Hex[],
): Promise<SettleBeforeAnswerChaosResult> {
  const { cluster, chain, upstream } = s
  const db = postgres(cluster.url, { max: 1, onnotice: () => {} })
  try {
    // The leader's job settles what the path before the answer did not (b's captures among them).
    // A call answered with the pending receipt may have its capture still queued (the database away): wait
    // for every answered call's claim to be captured too, not only for the captured ones to settle.
    const answeredNonces = calls.filter((c) => c.outcome === 'served').map((c) => c.nonce.toLowerCase())
    await waitFor(
      async () => {
        const [row] = await db<{ open: number; done: number }[]>`
          SELECT count(*) FILTER (WHERE status = 'captured' AND settled_at IS NULL
                                    AND settlement_error IS NULL)::int AS open,
                 count(*) FILTER (WHERE status = 'captured'
                                    AND lower(authorization_payload->>'nonce') = ANY(${answeredNonces}))::int AS done
          FROM claims WHERE kind = 'eip3009'`
        return row!.open === 0 && row!.done === answeredNonces.length
      },
      { timeoutMs: 45_000, intervalMs: 250, what: 'every answered authorization captured and settled' },
    )
    const reader = createPublicClient({ transport: http(chain.rpcUrl) })
    const usdc = chain.usdcAddress
    const [usedLogs, transferLogs] = await Promise.all([
      reader.getLogs({ address: usdc, event: usedEvent, fromBlock: 0n }),
      reader.getLogs({ address: usdc, event: transferEvent, fromBlock: 0n }),
    ])
    const key = (payer: string, nonce: string) => `${payer.toLowerCase()}:${nonce.toLowerCase()}`
    const uses = new Map<string, Hex[]>()
    for (const l of usedLogs) {
      const k = key(l.args.authorizer!, l.args.nonce!)
      uses.set(k, [...(uses.get(k) ?? []), l.transactionHash])
    }
    const treasury = chain.treasury.address.toLowerCase()
    const payers = new Set(
      [...chain.payers.slice(0, PAYERS).map((p) => p.address), ...wallets].map((p) => p.toLowerCase()),
    )
    const paidTx = (payer: string, tx: string) =>
      transferLogs.some(
        (t) =>
          t.transactionHash === tx &&
          t.args.from!.toLowerCase() === payer.toLowerCase() &&
          t.args.to!.toLowerCase() === treasury &&
          t.args.value === PRICE_ATOMIC,
      )
    const carries = (payer: string, nonce: string, tx: string) =>
      (uses.get(key(payer, nonce)) ?? []).includes(tx as Hex) && paidTx(payer, tx)

    let settledTwice = [...uses.values()].filter((txs) => txs.length > 1).length
    for (const p of payers) {
      const outflow = transferLogs.filter((t) => t.args.from!.toLowerCase() === p)
      const used = usedLogs.filter((l) => l.args.authorizer!.toLowerCase() === p).length
      // The payers move money only by the authorizations: one Transfer of one price for each use.
      if (outflow.length !== used || outflow.some((t) => t.args.value !== PRICE_ATOMIC)) settledTwice++
    }
    const claims = await db<{ proof_key: string; status: string; payload: string; tx: string | null }[]>`
      SELECT proof_key, status, authorization_payload::text AS payload, settlement_tx AS tx
      FROM claims WHERE kind = 'eip3009'`
    let lost = 0
    let falseRecorded = 0
    const capturedKeys = new Set<string>()
    for (const c of claims) {
      const a = JSON.parse(c.payload) as { from: Hex; nonce: Hex }
      const k = key(a.from, a.nonce)
      if (c.status === 'captured') {
        capturedKeys.add(k)
        if (!uses.has(k)) lost++
      }
      if (c.status === 'captured' && c.tx !== null && !carries(a.from, a.nonce, c.tx)) falseRecorded++
    }
    let falseReceipts = 0
    let settled = 0
    let pendingWithHash = 0
    let pendingNoHash = 0
    for (const c of calls) {
      for (const r of c.receipts) {
        if (r.success && r.transaction) settled++
        else if (r.transaction) pendingWithHash++
        else pendingNoHash++
        if (r.success && !r.transaction) falseReceipts++
        else if (r.success && !carries(c.payer, c.nonce, r.transaction)) falseReceipts++
        // A pending receipt's hash is the transaction that carries it, or one the job replaced (never mined).
        else if (!r.success && r.transaction && uses.has(key(c.payer, c.nonce))) {
          const mined = await reader.getTransactionReceipt({ hash: r.transaction as Hex }).catch(() => null)
          if (mined !== null && !carries(c.payer, c.nonce, r.transaction)) falseReceipts++
        }
      }
    }
    const answered = calls.filter((c) => c.outcome === 'served')
    const servedUnpaid = answered.filter((c) => !uses.has(key(c.payer, c.nonce))).length
    const servedIds = (c: Call) => upstream.served.get(c.id) ?? 0
    const paidNotServed = calls.filter((c) => uses.has(key(c.payer, c.nonce)) && servedIds(c) === 0).length
    const notAnswered = calls.filter((c) => c.outcome !== 'served' && servedIds(c) > 0)
    const slotTxs = new Set<string>()
    let byTreasury = 0
    for (const txs of uses.values()) {
      const tx = await reader.getTransaction({ hash: txs[0]! })
      if (tx.from.toLowerCase() === treasury) byTreasury++
      else slotTxs.add(txs[0]!)
    }
    const notes = calls
      .filter((c) => c.outcome !== 'served' || c.killedInFlight || servedIds(c) !== 1)
      .map(
        (c) =>
          `${c.id} ${c.outcome} served ${servedIds(c)}× used ${uses.has(key(c.payer, c.nonce))}: ${c.trail.join(' ')}`,
      )
    const drift = await balancesAgainstEntries(cluster.url)
    const walletSet = new Set(wallets.map((w) => w.toLowerCase()))
    const fromWallets = answered.filter((c) => walletSet.has(c.payer.toLowerCase()))
    const paidWallets = [...new Set(fromWallets.map((c) => c.payer.toLowerCase() as Hex))]
    const deployed = await Promise.all(
      paidWallets.map(async (w) => (await reader.getCode({ address: w })) !== undefined),
    )
    return {
      calls: calls.length,
      answered: answered.length,
      answeredSettled: settled,
      answeredPendingWithHash: pendingWithHash,
      answeredPendingNoHash: pendingNoHash,
      refused: calls.filter((c) => c.outcome === 'refused').length,
      gaveUp: calls.filter((c) => c.outcome === 'gave_up').length,
      killedInFlight: calls.filter((c) => c.killedInFlight).length,
      upstreamServedNotAnswered: notAnswered.length,
      upstreamServedNotAnsweredCharged: notAnswered.filter((c) => capturedKeys.has(key(c.payer, c.nonce)))
        .length,
      settledTwice,
      lost,
      falseReceipts,
      falseRecorded,
      servedUnpaid,
      paidNotServed,
      servedTwice: calls.filter((c) => servedIds(c) > 1).length,
      counterfactualAnswered: fromWallets.length,
      counterfactualDeployed: deployed.filter(Boolean).length,
      counterfactualMissing: deployed.filter((d) => !d).length,
      bySlots: uses.size - byTreasury,
      byTreasury,
      kill,
      reconcileExit: await runReconcile(cluster.url, chain, log),
      balanceDrift: drift.drifted,
      notes,
    }
  } finally {
    await db.end()
  }
}

export function formatSettleBeforeAnswer(r: SettleBeforeAnswerChaosResult): string {
  return [
    `calls ${r.calls}: answered ${r.answered} (receipt settled ${r.answeredSettled}, pending with hash ${r.answeredPendingWithHash}, pending without ${r.answeredPendingNoHash}), refused ${r.refused}, gave up ${r.gaveUp}`,
    `SIGKILL b pid ${r.kill.pid}: ${r.kill.signal}, pid gone ${r.kill.pidGone}; ${r.killedInFlight} calls in flight on b, ${r.upstreamServedNotAnswered} served upstream and never answered (${r.upstreamServedNotAnsweredCharged} of them charged)`,
    `settled twice ${r.settledTwice}, lost ${r.lost}, false receipts ${r.falseReceipts}, false recorded tx ${r.falseRecorded}, served unpaid ${r.servedUnpaid}, paid not served ${r.paidNotServed}, served twice ${r.servedTwice}`,
    `counterfactual wallets: ${r.counterfactualAnswered} calls answered, ${r.counterfactualDeployed} wallets deployed, ${r.counterfactualMissing} paid and missing`,
    `settled by the slots ${r.bySlots}, by the treasury (leader's job) ${r.byTreasury}; reconcile exit ${r.reconcileExit}, balance drift ${r.balanceDrift}`,
    ...r.notes.map((n) => `  note: ${n}`),
  ].join('\n')
}
