// Settles `exact` authorizations before their answers' heads are sent, in micro-batches: the authorizations
// of calls served within window_ms share one transaction (through the AuthorizationBatcher when the chain
// has it), so the receipt can name the mined transaction that carries the payer's authorization. Order per
// batch: the captures are committed, the transaction is signed, its hash recorded on the claims (a crash
// after the broadcast leaves a hash the leader's settlement job looks up, never an authorization sent
// blind), broadcast, then its receipt awaited for at most wait_ms. The leader's job books the revenue when
// it finds the recorded transaction mined, exactly as for its own batches.
//
// The transactions are sent from the settler key, not the treasury: this process assigns its nonces alone
// (one settler key per process), while the treasury's nonces belong to the leader's payouts and settlements.
import type { Hash, Hex, PrivateKeyAccount, TransactionReceipt } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { forgetSettlementTx, recordSettlementTx } from '../../books/settlement.ts'
import type { ChainContext } from '../../chain/connect.ts'
import { broadcast, type FeeQuote, pendingNonce, quoteFees } from '../../chain/payouts.ts'
import type { StoredAuthorization } from '../../chain/settle.ts'
import { signSettlement } from '../../chain/settle.ts'
import { hasAuthorizationBatcher, settlementOutcomes, signSettlementBatch } from '../../chain/settle-batch.ts'
import type { Sql } from '../../db/sql.ts'
import type { Logger } from '../../observability/logger.ts'

/** Gas for one transferWithAuthorization sent alone (as the settlement job allows). */
const SETTLEMENT_GAS = 150_000n

/** How long a fee quote is reused (a block or so: quoteFees already adds headroom over the base fee). */
const FEES_TTL_MS = 1_000

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
  proofKey: string
  authorization: StoredAuthorization
  /** Resolves once the capture is committed (true: the claim is captured). */
  written: Promise<boolean>
  resolve(outcome: EarlySettlement): void
}

export interface SettleBeforeAnswerOptions {
  sql: Sql
  chain: ChainContext
  logger: Logger
  settlerKey: Hex
  windowMs: number
  waitMs: number
  /** Authorizations per transaction when the chain has the AuthorizationBatcher. */
  perTransaction: number
}

export class SettleBeforeAnswer {
  private readonly account: PrivateKeyAccount
  private queue: Item[] = []
  private timer: NodeJS.Timeout | null = null
  /** The settler's next nonce: read from the chain once, then counted here (this process alone sends). */
  private nonce: number | null = null
  /** Signing, recording and broadcasting of one batch at a time: nonces in order, no gap. */
  private sending: Promise<unknown> = Promise.resolve()
  private batcher: boolean | null = null
  /** A batch is being written, signed or sent. */
  private forming = false
  /** Fees quoted for the last batch, reused for FEES_TTL_MS: one RPC less per batch. */
  private fees: { quote: FeeQuote; atMs: number } | null = null
  private readonly inFlight = new Set<Promise<void>>()

  constructor(private readonly o: SettleBeforeAnswerOptions) {
    this.account = privateKeyToAccount(o.settlerKey)
  }

  get address(): Hex {
    return this.account.address
  }

  /** Settles one served call's authorization; never rejects (a failure is `unsent`, logged). */
  settle(
    proofKey: string,
    authorization: StoredAuthorization,
    written: Promise<boolean>,
  ): Promise<EarlySettlement> {
    return new Promise((resolve) => {
      // The answer never waits on a stuck database or RPC past this: it goes out saying pending (true: the
      // settlement job settles whatever this batch did not). A later outcome is ignored (settled once).
      const deadline = setTimeout(() => resolve(UNSENT), this.o.windowMs + 2 * this.o.waitMs)
      const done = (outcome: EarlySettlement) => {
        clearTimeout(deadline)
        resolve(outcome)
      }
      this.queue.push({ proofKey, authorization, written, resolve: done })
      this.timer ??= setTimeout(() => this.flush(), this.o.windowMs)
    })
  }

  /** Waits for the batches in flight (shutdown). */
  async stop(): Promise<void> {
    while (this.queue.length > 0 || this.inFlight.size > 0) {
      if (this.timer !== null) clearTimeout(this.timer)
      this.flush()
      await Promise.all([...this.inFlight])
    }
  }

  private flush(): void {
    this.timer = null
    // One batch is formed at a time: while it is written, signed and sent, the next one gathers (group
    // commit), so a busy chain or database makes batches larger rather than the queue longer.
    if (this.forming) return
    const items = this.queue
    this.queue = []
    if (items.length === 0) return
    this.forming = true
    const run = this.run(items, () => this.formed()).catch((err) => {
      this.formed()
      this.o.logger.warn('settle before answer failed; the settlement job settles these later', { err })
      for (const it of items) it.resolve(UNSENT)
    })
    this.inFlight.add(run)
    run.finally(() => this.inFlight.delete(run))
  }

  /** The batch in the making is sent (or given up): the next one may go. */
  private formed(): void {
    if (!this.forming) return
    this.forming = false
    if (this.queue.length > 0 && this.timer === null) this.timer = setTimeout(() => this.flush(), 0)
  }

  private async run(items: Item[], formed: () => void): Promise<void> {
    // The claim must be captured before a transaction is recorded on it (the books' precondition).
    // A capture not committed within wait_ms (database trouble) is left to the settlement job.
    const written = await Promise.all(items.map((it) => within(it.written, this.o.waitMs, false)))
    const ready = items.filter((it, i) => {
      if (!written[i]) it.resolve(UNSENT)
      return written[i]
    })
    if (ready.length === 0) return formed()
    const per = (await this.hasBatcher()) ? this.o.perTransaction : 1
    const groups: Item[][] = []
    for (let i = 0; i < ready.length; i += per) groups.push(ready.slice(i, i + per))
    const sent = await this.exclusive(() => this.send(groups))
    formed()
    await Promise.all(sent.map((s) => this.awaitReceipt(s.items, s.hash)))
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.sending.then(fn, fn)
    this.sending = next.catch(() => {})
    return next
  }

  /** Signs, records, broadcasts in nonce order; returns what is on its way. */
  private async send(groups: Item[][]): Promise<Array<{ items: Item[]; hash: Hash }>> {
    const client = this.o.chain.publicClient
    const [fees, nonce] = await Promise.all([
      this.quote(),
      this.nonce ?? pendingNonce(client, this.account.address),
    ])
    const signed = await Promise.all(groups.map((items, i) => this.sign(items, nonce + i, fees)))
    const recorded = await recordSettlementTx(
      this.o.sql,
      signed.flatMap((s) => s.items.map((it) => ({ proofKey: it.proofKey, hash: s.hash }))),
    )
    const out: Array<{ items: Item[]; hash: Hash }> = []
    let next = nonce
    for (const [i, s] of signed.entries()) {
      // A claim the leader's job recorded first (it got there between our capture and our record): that
      // transaction is not sent, nor any later nonce (no gap); the rest is the job's to settle.
      const whole = s.items.every((it) => recorded.has(it.proofKey))
      const r = whole ? await broadcast(client, s.rawTx) : null
      if (r !== null && (r.ok || r.reason === 'already_known')) {
        out.push(s)
        next = nonce + i + 1
        continue
      }
      if (r !== null && !r.ok) {
        this.o.logger.warn(
          'settle before answer: broadcast refused; the settlement job settles these later',
          {
            reason: r.reason,
            tx: s.hash,
          },
        )
      }
      for (const rest of signed.slice(i)) {
        for (const it of rest.items) {
          if (recorded.has(it.proofKey))
            await forgetSettlementTx(this.o.sql, { proofKey: it.proofKey, hash: rest.hash })
          it.resolve(UNSENT)
        }
      }
      // A refused nonce is read again from the chain next time (it may have moved under us).
      this.nonce = r === null ? next : null
      return out
    }
    this.nonce = next
    return out
  }

  private sign(
    items: Item[],
    nonce: number,
    fees: FeeQuote,
  ): Promise<{ items: Item[]; rawTx: Hex; hash: Hash }> {
    const chain = this.o.chain
    const common = { chainId: chain.chainId, usdc: chain.usdc.address, nonce, fees }
    const signed =
      items.length === 1
        ? signSettlement(this.account, {
            ...common,
            authorization: items[0]!.authorization,
            gas: SETTLEMENT_GAS,
          })
        : signSettlementBatch(this.account, {
            ...common,
            authorizations: items.map((it) => it.authorization),
          })
    return signed.then((s) => ({ items, ...s }))
  }

  private async awaitReceipt(items: Item[], hash: Hash): Promise<void> {
    const receipt = await this.receiptWithin(hash)
    if (receipt === null) {
      // Not mined within wait_ms: the answer says so, with the transaction that carries the authorization.
      for (const it of items) it.resolve({ state: 'sent', transaction: hash })
      return
    }
    const outcomes = settlementOutcomes(receipt, {
      usdc: this.o.chain.usdc.address,
      authorizations: items.map((it) => it.authorization),
    })
    // Only an authorization the token logged as used in this transaction is called settled; any other
    // outcome is left to the settlement job (which reads the same receipt) and the receipt says pending.
    for (const [i, it] of items.entries()) {
      it.resolve(outcomes[i] === 'used' ? { state: 'settled', transaction: hash } : UNSENT)
    }
  }

  /**
   * The receipt, asked at once and then at growing intervals (5 ms up to 100 ms) until wait_ms: a chain that
   * mines at once (or a pre-confirmation RPC) answers the first ask; a 2 s block is not polled 400 times.
   * A failed ask counts as not mined yet.
   */
  private async receiptWithin(hash: Hash): Promise<TransactionReceipt | null> {
    const until = performance.now() + this.o.waitMs
    for (let delayMs = 5; ; delayMs = Math.min(100, delayMs * 2)) {
      const receipt = await this.o.chain.publicClient.getTransactionReceipt({ hash }).catch(() => null)
      if (receipt !== null) return receipt
      const left = until - performance.now()
      if (left <= 0) return null
      await new Promise((r) => setTimeout(r, Math.min(delayMs, left)))
    }
  }

  private async quote(): Promise<FeeQuote> {
    const now = performance.now()
    if (this.fees !== null && now - this.fees.atMs < FEES_TTL_MS) return this.fees.quote
    const quote = await quoteFees(this.o.chain.publicClient)
    this.fees = { quote, atMs: now }
    return quote
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
