// Settles `exact` authorizations before their answers' heads are sent, in micro-batches: the authorizations
// of calls served together share one transaction (through the AuthorizationBatcher when the chain has it), so
// the receipt can name the mined transaction that carries the payer's authorization.
//
// A served call hands its capture here instead of to the batch writer. The groups go through a pipeline,
// several on their way at once (IN_FLIGHT): a group is cut, takes its nonces (counted here, in cut order),
// its transactions are signed, and its captures written (group-committed with the claims, as any capture),
// each carrying its transaction's hash and its place in it, so the hash is recorded in the capture's own
// commit, before the broadcast (a crash after the broadcast leaves a hash the leader's settlement job looks
// up, never an authorization sent blind); then, once the group cut before it is broadcast, it is broadcast
// (nonce order, no gap), and each transaction's receipt awaited (at most wait_ms) for its own calls. While
// one group is broadcast, the next ones are signed and written. One database commit per call on the way,
// not two. Once the answers are out, the authorizations the receipt shows used are marked settled and their
// revenue booked (the transition the leader's job uses, which finds them done; what this path missed, the
// job settles).
//
// The transactions are sent from this process's settler slot (src/schemes/exact/settler.ts), not the treasury:
// the slot's lock makes its nonces this process's alone, so they are counted here without a round trip, while
// the treasury's nonces belong to the leader's payouts and settlements.
//
// x402 `upto` permits go the same way (settleUpto), once their charge is known: the same groups, nonces and
// captures, their own transactions (through the UptoSettlementBatcher, of which the slot is a delegate),
// their own outcome (the batcher's UptoSettled log) and their own books transition (settleUptoClaims).
import type { Hash, Hex, PrivateKeyAccount, TransactionReceipt } from 'viem'
import type { BatchWriter } from '../../books/batch-writer.ts'
import type { Capture } from '../../books/claims.ts'
import { forgetSettlementTx, settleAuthorizations } from '../../books/settlement.ts'
import { forgetUptoSettlementTx, settleUptoClaims } from '../../books/upto-settlement.ts'
import type { ChainContext } from '../../chain/connect.ts'
import { broadcast, type FeeQuote, pendingNonce, quoteFees } from '../../chain/payouts.ts'
import { ReceiptWatch } from '../../chain/receipt-watch.ts'
import type { StoredAuthorization } from '../../chain/settle.ts'
import { hasAuthorizationBatcher, settlementOutcomes, signAuthorizations } from '../../chain/settle-batch.ts'
import { signingAccount } from '../../chain/signing-account.ts'
import {
  signUptoSettlement,
  type UptoSettlementItem,
  uptoSettlementOutcomes,
} from '../../chain/upto-settle.ts'
import type { Sql } from '../../db/sql.ts'
import type { Logger } from '../../observability/logger.ts'
import {
  earlySettlementBatchSize,
  earlySettlementPhase,
  settlements,
  uptoSettlements,
} from '../../observability/metrics.ts'
import { groupCutDueMs } from './group-cut.ts'
import { NonceGaps } from './nonce-gaps.ts'

/** How long a fee quote is reused (a block or so: quoteFees already adds headroom over the base fee). */
const FEES_TTL_MS = 1_000

/**
 * A quote older than FEES_TTL_MS is still used, up to this age, while a fresh one is asked beside it: the
 * fee RPCs (two) leave the groups' path. Two blocks on Base, of the six full blocks quoteFees' 2x headroom
 * over the base fee lasts.
 */
const FEES_MAX_AGE_MS = 4_000

/** Settled authorizations are booked together at most this often (one database transaction each time). */
const MARK_EVERY_MS = 200

/**
 * What happened to one authorization before its answer:
 * - settled: mined in `transaction`, and the token logged this authorization used there;
 * - sent: `transaction` carries it and was accepted by the node, its receipt not in within wait_ms;
 * - unsent: no transaction of ours carries it now (the leader's settlement job will).
 */
export type EarlySettlement =
  | { state: 'settled'; transaction: Hash }
  | { state: 'sent'; transaction: Hash }
  | { state: 'unsent' }

const UNSENT: EarlySettlement = { state: 'unsent' }

interface Item {
  /** The served call's capture: this path writes it, whatever happens to the settlement. */
  capture: Capture
  /** An `exact` authorization, or (null) an `upto` permit and its charge. */
  authorization: StoredAuthorization | null
  upto: UptoSettlementItem | null
  /** When it was handed over (performance.now()): it waits from then for its group's turn. */
  readyAtMs: number
  resolve(outcome: EarlySettlement): void
}

/** One transaction signed for a group: its authorizations in the order it carries them. */
interface Signed {
  items: Item[]
  rawTx: Hex
  hash: Hash
}

export interface SettleBeforeAnswerOptions {
  sql: Sql
  /** The claims/captures writer: the captures go through it, with their settlement's hash. */
  books: BatchWriter
  chain: ChainContext
  logger: Logger
  settlerKey: Hex
  windowMs: number
  waitMs: number
  /** Data-plane processes sharing the calls (server.workers): the busy cut window grows with them. */
  processes: number
  /** Authorizations per transaction when the chain has the AuthorizationBatcher. */
  perTransaction: number
}

/**
 * Groups cut and not yet through their broadcast, at most: while one is broadcast, the next ones are signed
 * and written (their captures group-committed together by the batch writer).
 */
const IN_FLIGHT = 4

/** The nonces a group took: consecutive from `first`, one per transaction, counted in `epoch`. */
interface Nonces {
  first: number
  /** Authorizations per transaction. */
  per: number
  epoch: number
}

export class SettleBeforeAnswer {
  private readonly account: PrivateKeyAccount
  /** Served calls waiting for the next group. */
  private ready: Item[] = []
  private timer: NodeJS.Timeout | null = null
  /** When the timer cuts the next group (performance.now()). */
  private timerDueMs = 0
  /** The settler's next nonce: read from the chain once, then counted here (this process alone sends). */
  private nonce: number | null = null
  /** Nonces are taken one group after another, in the order the groups were cut (their broadcast order). */
  private nonces: Promise<unknown> = Promise.resolve()
  /**
   * Bumped when the nonces counted here stop following the chain (a group not broadcast, a refusal, the slot
   * taken again): a group that took its nonces in an older epoch is not broadcast (it would leave a gap).
   */
  private epoch = 0
  /** Resolved when the group cut last has sent its broadcasts (not their answers): the next one sends after. */
  private turn: Promise<void> = Promise.resolve()
  /** Groups cut and not yet through their broadcast. */
  private inPipe = 0
  private lastCutMs = Number.NEGATIVE_INFINITY
  private batcher: boolean | null = null
  /** Fees quoted for the last batch, reused for FEES_TTL_MS: one RPC less per batch. */
  private fees: { quote: FeeQuote; atMs: number } | null = null
  private quoting: Promise<FeeQuote> | null = null
  /** Groups being sent, receipts being awaited, settlements being booked. */
  private readonly inFlight = new Set<Promise<unknown>>()
  /** Authorizations the chain used in our transactions, with the block, not booked yet. */
  private mined = new Map<string, bigint>()
  /** Upto permits the batcher logged settled, with the amount moved and the block, not booked yet. */
  private minedUpto = new Map<string, { settledAtomic: bigint; block: bigint }>()
  private marking: Promise<void> | null = null
  private readonly phase = {
    queue: earlySettlementPhase.labels('queue'),
    sign: earlySettlementPhase.labels('sign'),
    capture: earlySettlementPhase.labels('capture'),
    turn: earlySettlementPhase.labels('turn'),
    broadcast: earlySettlementPhase.labels('broadcast'),
    send: earlySettlementPhase.labels('send'),
    receipt: earlySettlementPhase.labels('receipt'),
  }

  /** Fills a nonce the node dropped, so the ones after it are mined. */
  readonly gaps: NonceGaps
  /** The receipts of the transactions in flight, one question a look. */
  private readonly receipts: ReceiptWatch

  /** Told after each of its transactions is mined (the gas watch reads the balance again). */
  onMined: (() => void) | null = null

  constructor(private readonly o: SettleBeforeAnswerOptions) {
    // libsecp256k1 when its native binary loads (as the treasury's): a signature per group on the answers' path.
    this.account = signingAccount(o.settlerKey)
    this.gaps = new NonceGaps({
      client: o.chain.publicClient,
      account: this.account,
      chainId: o.chain.chainId,
      quote: () => this.quote(),
      logger: o.logger,
    })
    this.receipts = new ReceiptWatch(o.chain.publicClient)
  }

  /** The slot was lost and taken again: another process may have used its nonces meanwhile. */
  forgetNonce(): void {
    this.epoch += 1
    this.nonce = null
  }

  get address(): Hex {
    return this.account.address
  }

  /**
   * Writes a served call's capture and settles its authorization; never rejects (a failure is `unsent`,
   * logged). The capture is written in every case (with no hash when no transaction could be signed).
   */
  settle(capture: Capture, authorization: StoredAuthorization): Promise<EarlySettlement> {
    return this.enqueue(capture, authorization, null)
  }

  /**
   * As settle, for an `upto` permit and its call's charge (0 < amount ≤ the permit's maximum; the capture's
   * amount): one of the batcher's items, in a transaction of upto permits only.
   */
  settleUpto(capture: Capture, upto: UptoSettlementItem): Promise<EarlySettlement> {
    return this.enqueue(capture, null, upto)
  }

  private enqueue(
    capture: Capture,
    authorization: StoredAuthorization | null,
    upto: UptoSettlementItem | null,
  ): Promise<EarlySettlement> {
    return new Promise((resolve) => {
      // The answer never waits on a stuck database or RPC past this: it goes out saying pending (true: the
      // settlement job settles whatever this batch did not). A later outcome is ignored (settled once).
      const deadline = setTimeout(() => resolve(UNSENT), this.o.windowMs + 2 * this.o.waitMs)
      this.ready.push({
        capture,
        authorization,
        upto,
        readyAtMs: performance.now(),
        resolve: (outcome) => {
          clearTimeout(deadline)
          resolve(outcome)
        },
      })
      this.schedule()
    })
  }

  /** Waits until the calls handed over are written and their transactions sent (shutdown, flush). */
  async stop(): Promise<void> {
    while (this.ready.length > 0 || this.inFlight.size > 0) {
      this.flush()
      await Promise.race([Promise.all([...this.inFlight]), new Promise((r) => setTimeout(r, 5))])
    }
    await this.gaps.stop()
  }

  /**
   * Cuts the next group when groupCutDueMs says (group commit: under load the groups grow, not the wait),
   * while up to IN_FLIGHT groups are on their way.
   */
  private schedule(): void {
    if (this.ready.length === 0 || this.inPipe >= IN_FLIGHT) return
    const now = performance.now()
    const due = groupCutDueMs({
      count: this.ready.length,
      lastCutMs: this.lastCutMs,
      nowMs: now,
      windowMs: this.o.windowMs,
      perTransaction: this.o.perTransaction,
      processes: this.o.processes,
    })
    if (due <= now) return this.flush()
    if (this.timer !== null) {
      if (this.timerDueMs <= due) return
      clearTimeout(this.timer)
    }
    this.timerDueMs = due
    this.timer = setTimeout(() => this.flush(), due - now)
  }

  private flush(): void {
    if (this.timer !== null) {
      clearTimeout(this.timer)
      this.timer = null
    }
    if (this.ready.length === 0 || this.inPipe >= IN_FLIGHT) return
    const items = this.ready
    this.ready = []
    this.lastCutMs = performance.now()
    this.inPipe += 1
    // Its nonces are taken now, in cut order; it broadcasts after the group cut before it.
    const nonces = this.takeNonces(items)
    const previous = this.turn
    let dispatched = () => {}
    this.turn = new Promise<void>((resolve) => {
      dispatched = resolve
    })
    const sent = this.sendGroup(items, nonces, { previous, dispatched })
      .catch((err) => {
        this.o.logger.warn('settle before answer failed; the settlement job settles these later', { err })
        for (const it of items) it.resolve(UNSENT)
        return []
      })
      .finally(() => {
        dispatched()
        this.inPipe -= 1
        this.schedule()
      })
    // Each transaction's receipt is awaited on its own: a call waits for its own group, no other.
    const receipts = sent.then((groups) =>
      Promise.all(groups.map((g) => this.awaitReceipt(g.items, g.hash, g.nonce, g.sentMs))),
    )
    this.track(sent)
    this.track(receipts)
  }

  private track(p: Promise<unknown>): void {
    this.inFlight.add(p)
    p.finally(() => this.inFlight.delete(p))
  }

  /**
   * Takes the nonces of a group of `count` authorizations, after the groups cut before it: counted here,
   * read from the chain only when not known (first use, after a refusal or a lost slot).
   */
  private takeNonces(items: Item[]): Promise<Nonces> {
    const taken = this.nonces.then(async () => {
      const per = (await this.hasBatcher()) ? this.o.perTransaction : 1
      while (this.nonce === null) {
        const epoch = this.epoch
        const read = await pendingNonce(this.o.chain.publicClient, this.account.address)
        if (this.epoch === epoch && this.nonce === null) this.nonce = read
      }
      const first = this.nonce
      this.nonce += transactionsOf(items, per, this.o.perTransaction).length
      return { first, per, epoch: this.epoch }
    })
    this.nonces = taken.catch(() => undefined)
    return taken
  }

  /**
   * The nonces counted here no longer follow the chain from `epoch` on: the next group takes `next` (null:
   * read from the chain), and the groups that took later nonces in that epoch are not broadcast.
   */
  private restart(epoch: number, next: number | null): void {
    if (epoch !== this.epoch) return
    this.epoch += 1
    this.nonce = next
  }

  /**
   * Signs, writes the captures with the hashes, then (its turn come: the group before it broadcast)
   * broadcasts in nonce order; returns what is on its way. Never throws after taking its nonces.
   */
  private async sendGroup(
    items: Item[],
    nonces: Promise<Nonces>,
    turn: { previous: Promise<void>; dispatched: () => void },
  ): Promise<Array<{ items: Item[]; hash: Hash; nonce: number; sentMs: number }>> {
    const startMs = performance.now()
    for (const it of items) this.phase.queue.observe((startMs - it.readyAtMs) / 1000)
    earlySettlementBatchSize.observe(items.length)
    let taken: Nonces | null = null
    let signed: Signed[] | null = null
    try {
      taken = await nonces
      const { first, per } = taken
      const fees = await this.quote()
      const groups = transactionsOf(items, per, this.o.perTransaction)
      signed = await Promise.all(groups.map((g, i) => this.sign(g, first + i, fees)))
      this.phase.sign.observe((performance.now() - startMs) / 1000)
    } catch (err) {
      // Nothing signed: the captures are written all the same, without a hash (the job settles them).
      this.o.logger.warn('settle before answer: could not sign; the settlement job settles these later', {
        err,
      })
    }
    const captureMs = performance.now()
    const recorded = await this.writeCaptures(items, signed)
    const turnMs = performance.now()
    this.phase.capture.observe((turnMs - captureMs) / 1000)
    await turn.previous
    const broadcastMs = performance.now()
    this.phase.turn.observe((broadcastMs - turnMs) / 1000)
    if (signed === null || taken === null) {
      // Nonces taken and nothing sent at them: the next group takes them again.
      if (taken !== null) this.restart(taken.epoch, taken.first)
      for (const it of items) it.resolve(UNSENT)
      return []
    }
    const out = await this.broadcastInOrder(signed, taken, recorded, turn.dispatched)
    const sentMs = performance.now()
    this.phase.broadcast.observe((sentMs - broadcastMs) / 1000)
    this.phase.send.observe((sentMs - startMs) / 1000)
    return out.map((s) => ({ ...s, sentMs }))
  }

  /**
   * Hands the captures to the batch writer, each with its transaction's hash and place (if signed), and
   * waits for their commit, at most wait_ms. Returns the proof keys whose capture committed with the hash.
   */
  private async writeCaptures(items: Item[], signed: Signed[] | null): Promise<Set<string>> {
    const places = new Map<Item, Capture['settlement']>()
    for (const s of signed ?? []) {
      for (const [index, it] of s.items.entries())
        places.set(it, { hash: s.hash, index, count: s.items.length })
    }
    const writes: Array<Promise<boolean>> = []
    for (const it of items) {
      const settlement = places.get(it) ?? null
      writes.push(
        within(
          new Promise<boolean>((resolve) =>
            this.o.books.capture({ ...it.capture, settlement, onWritten: resolve }),
          ),
          this.o.waitMs,
          false,
        ),
      )
    }
    const applied = await Promise.all(writes)
    const recorded = new Set<string>()
    for (const [i, it] of items.entries()) if (applied[i]) recorded.add(it.capture.proofKey)
    return recorded
  }

  /**
   * Broadcasts in nonce order: the group's transactions in one batched request, and the next group's sent
   * once these are (not once the node answered: its round trip overlaps theirs; a node takes a nonce that
   * arrives ahead of the one before it into its queue). A transaction with a capture that did not commit in
   * time (or found its claim no longer claimed) is not sent, nor any later nonce (no gap): neither the rest of
   * this group nor the groups after it that took their nonces in the same epoch. Their recorded hashes are
   * forgotten (a capture committing later with one is found unmined by the leader's job, and signed again from
   * there). A transaction the node refuses is forgotten the same way; the nonce is read again from the chain,
   * and a hole it leaves under later ones is filled by NonceGaps.
   */
  private async broadcastInOrder(
    signed: Signed[],
    taken: Nonces,
    recorded: Set<string>,
    dispatched: () => void,
  ): Promise<Array<{ items: Item[]; hash: Hash; nonce: number }>> {
    const client = this.o.chain.publicClient
    // A group before this one was not (wholly) broadcast: these nonces would follow a gap.
    const current = taken.epoch === this.epoch
    let n = 0
    while (current && n < signed.length && signed[n]!.items.every((it) => recorded.has(it.capture.proofKey)))
      n++
    // Not sent: the next group takes this nonce.
    if (current && n < signed.length) this.restart(taken.epoch, taken.first + n)
    const answers = signed.slice(0, n).map((s) => broadcast(client, s.rawTx))
    dispatched()
    await this.unsend(signed.slice(n), recorded)
    const out: Array<{ items: Item[]; hash: Hash; nonce: number }> = []
    for (const [i, r] of (await Promise.all(answers)).entries()) {
      const s = signed[i]!
      if (r.ok || r.reason === 'already_known') {
        this.gaps.sent(taken.first + i, s.hash)
        out.push({ ...s, nonce: taken.first + i })
        continue
      }
      this.o.logger.warn('settle before answer: broadcast refused; the settlement job settles these later', {
        reason: r.reason,
        tx: s.hash,
      })
      // Refused: read the nonce again from the chain (it may have moved under us).
      this.restart(taken.epoch, null)
      await this.unsend([s], recorded)
    }
    return out
  }

  /** Transactions signed and not sent: their hashes are forgotten, their calls answer pending. */
  private async unsend(rest: Signed[], recorded: Set<string>): Promise<void> {
    for (const s of rest) {
      for (const it of s.items) {
        const proofKey = it.capture.proofKey
        const forget = it.upto === null ? forgetSettlementTx : forgetUptoSettlementTx
        if (recorded.has(proofKey)) await forget(this.o.sql, { proofKey, hash: s.hash })
        it.resolve(UNSENT)
      }
    }
  }

  private sign(
    items: Item[],
    nonce: number,
    fees: FeeQuote,
  ): Promise<{ items: Item[]; rawTx: Hex; hash: Hash }> {
    const chain = this.o.chain
    const common = { chainId: chain.chainId, usdc: chain.usdc.address, nonce, fees }
    if (items[0]?.upto) {
      const upto = items.map((it) => it.upto!)
      const p = { chainId: chain.chainId, items: upto, nonce, fees }
      return signUptoSettlement(this.account, p).then((s) => ({ items, ...s }))
    }
    const authorizations = items.map((it) => it.authorization!)
    return signAuthorizations(this.account, { ...common, authorizations }).then((s) => ({ items, ...s }))
  }

  private async awaitReceipt(items: Item[], hash: Hash, nonce: number, sentMs: number): Promise<void> {
    const receipt = await this.receipts.wait(hash, nonce, this.o.waitMs)
    this.phase.receipt.observe((performance.now() - sentMs) / 1000)
    if (receipt === null) {
      // Not mined within wait_ms: the answer says so, with the transaction that carries the authorization.
      for (const it of items) it.resolve({ state: 'sent', transaction: hash })
      return
    }
    this.onMined?.()
    if (items[0]?.upto) return this.uptoOutcomes(items, hash, receipt)
    const outcomes = settlementOutcomes(receipt, {
      usdc: this.o.chain.usdc.address,
      authorizations: items.map((it) => it.authorization!),
    })
    // Only an authorization the token logged as used in this transaction is called settled; any other
    // outcome is left to the settlement job (which reads the same receipt) and the receipt says pending.
    const used: string[] = []
    for (const [i, it] of items.entries()) {
      if (outcomes[i] === 'used') used.push(it.capture.proofKey)
      it.resolve(outcomes[i] === 'used' ? { state: 'settled', transaction: hash } : UNSENT)
    }
    for (const k of used) this.mined.set(k, receipt.blockNumber)
    if (used.length > 0) this.markSoon()
  }

  /**
   * Only a permit the batcher logged settled for exactly its charge is called settled (what moved is booked
   * in any case: the job would book the same); any other outcome is the leader's job's, the receipt pending.
   */
  private uptoOutcomes(items: Item[], hash: Hash, receipt: TransactionReceipt): void {
    const outcomes = uptoSettlementOutcomes(receipt, { items: items.map((it) => it.upto!) })
    for (const [i, it] of items.entries()) {
      const o = outcomes[i]!
      const exact = o.status === 'settled' && o.amount === it.upto!.amount
      if (o.status === 'settled')
        this.minedUpto.set(it.capture.proofKey, { settledAtomic: o.amount, block: receipt.blockNumber })
      it.resolve(exact ? { state: 'settled', transaction: hash } : UNSENT)
    }
    if (this.minedUpto.size > 0) this.markSoon()
  }

  /**
   * Books what the receipts showed used, after the answers went out (the same transition as the job's;
   * whoever comes second changes nothing), the receipts of MARK_EVERY_MS in one transaction: the receipt URL
   * shows the calls settled, with their block, within that, at a few commits a second whatever the load.
   */
  private markSoon(): void {
    if (this.marking !== null) return
    this.marking = new Promise<void>((resolve) => setTimeout(resolve, MARK_EVERY_MS)).then(async () => {
      const blocks = this.mined
      const upto = this.minedUpto
      this.mined = new Map()
      this.minedUpto = new Map()
      const failed = (err: unknown) =>
        this.o.logger.warn('settle before answer: marking settled failed; the settlement job will', { err })
      // Counted where marked, as the job counts its own: whoever marks a claim settled counts it, once.
      if (blocks.size > 0)
        await settleAuthorizations(this.o.sql, { proofKeys: [...blocks.keys()], blocks }).then(
          (marked) => settlements.labels('settled').inc(marked.length),
          failed,
        )
      if (upto.size > 0) {
        const settled = [...upto].map(([proofKey, m]) => ({ proofKey, ...m }))
        await settleUptoClaims(this.o.sql, { settled }).then(
          (marked) => uptoSettlements.labels('settled').inc(marked.length),
          failed,
        )
      }
      this.marking = null
      if (this.mined.size > 0 || this.minedUpto.size > 0) this.markSoon()
    })
    this.track(this.marking)
  }

  private quote(): Promise<FeeQuote> {
    const now = performance.now()
    const age = this.fees === null ? Number.POSITIVE_INFINITY : now - this.fees.atMs
    if (age < FEES_TTL_MS) return Promise.resolve(this.fees!.quote)
    this.quoting ??= quoteFees(this.o.chain.publicClient)
      .then((quote) => {
        this.fees = { quote, atMs: now }
        return quote
      })
      .finally(() => {
        this.quoting = null
      })
    if (age < FEES_MAX_AGE_MS) {
      // Refreshed beside the group; a failed refresh is asked again by the next group.
      this.quoting.catch(() => undefined)
      return Promise.resolve(this.fees!.quote)
    }
    return this.quoting
  }

  private async hasBatcher(): Promise<boolean> {
    if (this.o.perTransaction === 1) return false
    this.batcher ??= await hasAuthorizationBatcher(this.o.chain.publicClient)
    return this.batcher
  }
}

/** `p`, or `fallback` once `ms` passed. */
function within<T>(p: Promise<T>, ms: number, fallback: T): Promise<T> {
  return new Promise<T>((resolve) => {
    const t = setTimeout(() => resolve(fallback), ms)
    p.then((v) => {
      clearTimeout(t)
      resolve(v)
    })
  })
}

/**
 * A group's transactions, in nonce order: its exact authorizations `per` a transaction (the
 * AuthorizationBatcher's, else one each), then its upto permits `perUpto` a transaction (the
 * UptoSettlementBatcher's): the two kinds go to different contracts, never in one transaction.
 */
function transactionsOf(items: Item[], per: number, perUpto: number): Item[][] {
  const exact = items.filter((it) => it.upto === null)
  const upto = items.filter((it) => it.upto !== null)
  const out: Item[][] = []
  for (let i = 0; i < exact.length; i += per) out.push(exact.slice(i, i + per))
  for (let i = 0; i < upto.length; i += perUpto) out.push(upto.slice(i, i + perUpto))
  return out
}
