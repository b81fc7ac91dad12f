// The facilitator's settlement group commit: the `exact` payloads /settle claimed in this process go out
// together, up to settlement.per_transaction per AuthorizationBatcher transaction, from a settler slot of
// this process's own (src/db/settler-slots.ts; its key derived as the data plane's are), so /settle answers
// within a block or two of its claim instead of waiting for the leader's next settlement step.
//
// Per group, one at a time (nonces in order, none skipped): the transactions are signed, their hashes
// recorded on the claims (recordSettlementTx: only a claim nobody recorded yet takes it, so the leader's
// batch and this one never both send an authorization), broadcast, and their receipts awaited while the next
// group gathers and goes, at most every GROUP_EVERY_MS (under load the groups grow, not the wait). A used
// authorization is marked settled and booked (settleAuthorizations, which applies the facilitator
// settlement) before its waiter is told.
// Anything else (not recorded, not mined within the wait, not used) is the leader's job's, which finds the
// recorded hash as it finds the settle-before-answer path's; the waiter then reads its outcome.
import { formatEther, type Hash, type Hex, type PrivateKeyAccount, parseEther } from 'viem'
import { forgetSettlementTx, recordSettlementTx, settleAuthorizations } from '../books/settlement.ts'
import type { ChainContext } from '../chain/connect.ts'
import { treasuryPrivateKey } from '../chain/connect.ts'
import { fundDevGas } from '../chain/dev-chain.ts'
import { broadcast, type FeeQuote, pendingNonce, quoteFees } from '../chain/payouts.ts'
import { ReceiptWatch } from '../chain/receipt-watch.ts'
import type { StoredAuthorization } from '../chain/settle.ts'
import { hasAuthorizationBatcher, settlementOutcomes, signAuthorizations } from '../chain/settle-batch.ts'
import { settlerSlotKey } from '../chain/settler-keys.ts'
import { signingAccount } from '../chain/signing-account.ts'
import type { Config } from '../config/schema.ts'
import { settleBeforeAnswerUnavailable } from '../config/settle-before-answer.ts'
import { claimSettlerSlot } from '../db/settler-slots.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'
import { settlerBalance, settlerBalanceFloor } from '../observability/metrics.ts'

/** A fee quote is reused this long (a block or so; quoteFees adds headroom over the base fee). */
const FEES_TTL_MS = 1_000
/** On the dev chain the derived key starts empty: it is given this much anvil ETH. */
const DEV_GAS_WEI = parseEther('10')
const SLOT_KEEPALIVE_MS = 5_000
/**
 * Groups go out at most this often: a block holds them all the same (Base mines every 2 s), so a busy settler
 * gathers 200 ms of payloads a transaction instead of sending one every few ms (the record and broadcast of a
 * group take that little on a PostgreSQL server); at most half a block of added wait before inclusion.
 */
const GROUP_EVERY_MS = 200

/** What became of one payload here: settled (mined, used, booked) or left to the leader's job. */
export type FacilitatorSent = { state: 'settled'; transaction: Hash } | { state: 'left' }

const LEFT: FacilitatorSent = { state: 'left' }

interface Item {
  proofKey: string
  authorization: StoredAuthorization
  resolve(outcome: FacilitatorSent): void
}

interface Signed {
  items: Item[]
  rawTx: Hex
  hash: Hash
  nonce: number
}

export interface FacilitatorSettlerOptions {
  sql: Sql
  chain: ChainContext
  logger: Logger
  key: Hex
  /** How long the first payload of an idle settler waits for others (a few ms). */
  windowMs: number
  /** How long a receipt is waited for before the payload is left to the leader's job. */
  waitMs: number
  perTransaction: number
  /** False while this process's slot lock is lost: nothing is sent meanwhile. */
  usable: () => boolean
}

export class FacilitatorSettler {
  private readonly account: PrivateKeyAccount
  private ready: Item[] = []
  private timer: NodeJS.Timeout | null = null
  private sending = false
  /** When the last group started (performance.now()). */
  private lastGroupMs = Number.NEGATIVE_INFINITY
  private nonce: number | null = null
  private batcher: boolean | null = null
  private fees: { quote: FeeQuote; atMs: number } | null = null
  private readonly inFlight = new Set<Promise<unknown>>()
  /**
   * The receipts of every group in flight, one question a look (a block holds several groups): each group
   * asking for its own at 5 to 100 ms was ~20 asks a transaction, 2,434 receipts fetched and parsed for 314
   * transactions in a 700/s bench step, against 542 for a step of that size now (the HTTP requests were
   * about as many either way: viem batched the asks of one tick).
   */
  private readonly receipts: ReceiptWatch
  /** Told the proof keys this settler settled (the shared waiters read them at once). */
  onSettled: ((proofKeys: string[]) => void) | null = null

  constructor(private readonly o: FacilitatorSettlerOptions) {
    this.account = signingAccount(o.key)
    this.receipts = new ReceiptWatch(o.chain.publicClient)
  }

  get address(): Hex {
    return this.account.address
  }

  usable(): boolean {
    return this.o.usable()
  }

  forgetNonce(): void {
    this.nonce = null
  }

  /** Sends a claimed `exact` payload in the next group; never rejects (a failure leaves it to the job). */
  settle(proofKey: string, authorization: StoredAuthorization): Promise<FacilitatorSent> {
    return new Promise((resolve) => {
      this.ready.push({ proofKey, authorization, resolve })
      this.schedule()
    })
  }

  /** Idle: the first payload waits window_ms for company; after a group, the next waits out GROUP_EVERY_MS. */
  private schedule(): void {
    if (this.sending || this.timer !== null || this.ready.length === 0) return
    const sinceMs = performance.now() - this.lastGroupMs
    const delayMs = Math.max(this.o.windowMs, GROUP_EVERY_MS - sinceMs)
    this.timer = setTimeout(() => this.flush(), delayMs)
  }

  async stop(): Promise<void> {
    while (this.ready.length > 0 || this.inFlight.size > 0) {
      this.flush()
      await Promise.race([Promise.all([...this.inFlight]), new Promise((r) => setTimeout(r, 5))])
    }
  }

  private flush(): void {
    if (this.timer !== null) clearTimeout(this.timer)
    this.timer = null
    if (this.sending || this.ready.length === 0) return
    const items = this.ready
    this.ready = []
    this.sending = true
    this.lastGroupMs = performance.now()
    const sent = this.send(items)
      .catch((err) => {
        this.o.logger.warn('facilitator settler: group not sent; the settlement job sends it', { err })
        this.nonce = null
        for (const it of items) it.resolve(LEFT)
        return [] as Signed[]
      })
      .finally(() => {
        this.sending = false
        this.schedule()
      })
    this.track(sent.then((groups) => Promise.all(groups.map((g) => this.settleMined(g)))))
  }

  private track(p: Promise<unknown>): void {
    this.inFlight.add(p)
    p.finally(() => this.inFlight.delete(p))
  }

  /** Signs, records and broadcasts in nonce order; returns the transactions on their way. */
  private async send(items: Item[]): Promise<Signed[]> {
    if (!this.o.usable()) {
      for (const it of items) it.resolve(LEFT)
      return []
    }
    const per = (await this.hasBatcher()) ? this.o.perTransaction : 1
    const client = this.o.chain.publicClient
    const [fees, first] = await Promise.all([this.quote(), this.nonce ?? pendingNonce(client, this.address)])
    const signed: Signed[] = []
    for (let i = 0; i < items.length; i += per) {
      const group = items.slice(i, i + per)
      const nonce = first + signed.length
      signed.push({ items: group, nonce, ...(await this.sign(group, nonce, fees)) })
    }
    const recorded = await recordSettlementTx(
      this.o.sql,
      signed.flatMap((s) =>
        s.items.map((it, index) => ({ proofKey: it.proofKey, hash: s.hash, index, count: s.items.length })),
      ),
    )
    const out: Signed[] = []
    for (const [i, s] of signed.entries()) {
      const whole = s.items.every((it) => recorded.has(it.proofKey))
      const r = whole ? await broadcast(client, s.rawTx) : null
      if (r !== null && (r.ok || r.reason === 'already_known')) {
        out.push(s)
        continue
      }
      if (r !== null && !r.ok)
        this.o.logger.warn('facilitator settler: broadcast refused; the settlement job sends these', {
          reason: r.reason,
          tx: s.hash,
        })
      // Not sent: neither this nonce nor a later one (no gap); the recorded hashes are forgotten.
      for (const rest of signed.slice(i)) {
        for (const it of rest.items) {
          if (recorded.has(it.proofKey))
            await forgetSettlementTx(this.o.sql, { proofKey: it.proofKey, hash: rest.hash })
          it.resolve(LEFT)
        }
      }
      this.nonce = r === null ? first + i : null
      return out
    }
    this.nonce = first + signed.length
    return out
  }

  private sign(items: Item[], nonce: number, fees: FeeQuote): Promise<{ rawTx: Hex; hash: Hash }> {
    const chain = this.o.chain
    const authorizations = items.map((it) => it.authorization)
    return signAuthorizations(this.account, {
      chainId: chain.chainId,
      usdc: chain.usdc.address,
      nonce,
      fees,
      authorizations,
    })
  }

  /** The receipt, then the used authorizations marked settled and booked before their waiters are told. */
  private async settleMined(s: Signed): Promise<void> {
    const receipt = await this.receipts.wait(s.hash, s.nonce, this.o.waitMs)
    if (receipt === null) {
      for (const it of s.items) it.resolve(LEFT)
      return
    }
    const outcomes = settlementOutcomes(receipt, {
      usdc: this.o.chain.usdc.address,
      authorizations: s.items.map((it) => it.authorization),
    })
    const used = s.items.filter((_, i) => outcomes[i] === 'used')
    const blocks = new Map(used.map((it) => [it.proofKey, receipt.blockNumber]))
    const marked = await settleAuthorizations(this.o.sql, {
      proofKeys: used.map((it) => it.proofKey),
      blocks,
    }).catch((err) => {
      this.o.logger.warn('facilitator settler: marking settled failed; the settlement job will', { err })
      return null
    })
    for (const it of s.items) {
      const settled = marked !== null && outcomes[s.items.indexOf(it)] === 'used'
      it.resolve(settled ? { state: 'settled', transaction: s.hash } : LEFT)
    }
    if (marked !== null && marked.length > 0) this.onSettled?.(marked)
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

/**
 * This process's facilitator settler on a slot of its own (the data plane's settler holds another: two
 * senders never share a key's nonces). Its slots are counted down from the last, on either database (the
 * data planes' count up from 0). Null when no key can be derived or no slot is free: /settle
 * then waits for the leader's batch.
 */
export async function startFacilitatorSettler(deps: {
  config: Config
  sql: Sql
  chain: ChainContext
  logger: Logger
  embedded: boolean
  workerIndex: number
}): Promise<{ settler: FacilitatorSettler | null; stop(): Promise<void> }> {
  const { config, chain, logger } = deps
  const none = { settler: null, stop: async () => {} }
  if (settleBeforeAnswerUnavailable(config) !== null) return none
  const o = config.settlement.before_answer
  const settlerKey = config.secrets?.settler_private_key ?? null
  const seed = {
    settlerKey,
    treasuryKey: settlerKey === null ? treasuryPrivateKey(config, chain.devChain ?? null) : null,
  }
  let settler: FacilitatorSettler | null = null
  const slot = await claimSettlerSlot(deps.sql, {
    embedded: deps.embedded,
    workerIndex: o.slots - 1 - deps.workerIndex,
    slots: o.slots,
    fromTop: true,
    keepaliveMs: SLOT_KEEPALIVE_MS,
    onLost: (err) => logger.error('facilitator settler slot lost; /settle waits for the leader', { err }),
    onRegained: () => settler?.forgetNonce(),
  })
  // The data plane's settler of this worker may hold the same slot on a small slots setting: leave it.
  if (slot === null || (deps.embedded && slot.slot <= deps.workerIndex)) {
    await slot?.release()
    logger.warn('no settler slot free for the facilitator; /settle waits for the leader batch')
    return none
  }
  const key = settlerSlotKey(seed, slot.slot)
  if (key === null) {
    await slot.release()
    return none
  }
  // Used while its key holds gas above the floor (read every gas_check_ms; the dev chain tops it up); none
  // at start: not used at all.
  const floor = parseEther(String(o.gas_floor_eth))
  // Watched as the data plane's slots are (the same gauges, by slot: SettlerGasLow fires below the floor);
  // readiness is not failed, since /settle still settles then, through the leader's batch.
  const label = { slot: String(slot.slot) }
  const unwatch = () => {
    settlerBalance.remove(label)
    settlerBalanceFloor.remove(label)
  }
  settlerBalanceFloor.set(label, o.gas_floor_eth)
  let funded = false
  settler = new FacilitatorSettler({
    sql: deps.sql,
    chain,
    logger,
    key,
    windowMs: o.window_ms,
    waitMs: Math.max(o.wait_ms, config.facilitator.settle_wait_ms),
    perTransaction: config.settlement.per_transaction,
    usable: () => funded && slot.held(),
  })
  const address = settler.address
  const checkGas = async () => {
    const client = chain.publicClient
    let wei = await client.getBalance({ address })
    if (wei < floor && config.chain.network === 'local') {
      await fundDevGas(client as never, address, DEV_GAS_WEI)
      wei = await client.getBalance({ address })
    }
    settlerBalance.set(label, Number(formatEther(wei)))
    if (funded && wei < floor)
      logger.warn('facilitator settler below gas_floor_eth; /settle waits for the leader batch', {
        settler: address,
        eth: formatEther(wei),
      })
    funded = wei >= floor
  }
  await checkGas().catch((err) => logger.warn('facilitator settler gas read failed', { err }))
  if (!funded) {
    // No gas at start (an operator funds the slots it means to use): the slot and its connection go back.
    logger.warn('the facilitator settler slot holds no gas; /settle waits for the leader batch', {
      settler: address,
      slot: slot.slot,
    })
    unwatch()
    await slot.release()
    return none
  }
  const timer = setInterval(() => void checkGas().catch(() => {}), o.gas_check_ms)
  timer.unref()
  logger.info('facilitator: settling in its own group commit', { settler: address, slot: slot.slot, funded })
  const s = settler
  return {
    settler: s,
    async stop() {
      clearInterval(timer)
      await s.stop()
      unwatch()
      await slot.release()
    },
  }
}
