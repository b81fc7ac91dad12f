// Waits for the receipts of one settler's transactions with one question a look, whatever the number in
// flight. A sender's transactions are mined in nonce order: while the lowest one waited for is not mined,
// none after it is. So each look asks for that one's receipt only; once it is in, the receipts of all the
// others are asked together (viem batches the calls of one tick into one request), and those found are
// handed over. A look is made at once when a transaction is handed in (a chain that mines at once, or an RPC
// serving pre-confirmations, answers the first ask), then every POLL_MS while any is waited for. Before, each
// transaction asked for its own receipt at growing intervals: with several groups in flight, tens of asks
// per block interval each, for receipts that could not be there yet.
import type { Hash, TransactionReceipt } from 'viem'
import type { ChainPublicClient } from './client.ts'
import { receiptOrNull } from './not-found.ts'

/** Between looks while transactions are waited for: well under a block (2 s on Base), a few asks a block. */
const POLL_MS = 50

interface Waiter {
  nonce: number
  untilMs: number
  resolve(receipt: TransactionReceipt | null): void
}

export class ReceiptWatch {
  private readonly waiting = new Map<Hash, Waiter>()
  private timer: NodeJS.Timeout | null = null
  private looking: Promise<void> | null = null
  /** A transaction was handed in during a look: look again at once after it. */
  private again = false

  constructor(
    private readonly client: ChainPublicClient,
    private readonly pollMs = POLL_MS,
  ) {}

  /** The receipt of `hash` (sent at `nonce`), or null when not mined within `ms`. Never rejects. */
  wait(hash: Hash, nonce: number, ms: number): Promise<TransactionReceipt | null> {
    return new Promise((resolve) => {
      this.waiting.set(hash, { nonce, untilMs: performance.now() + ms, resolve })
      this.lookSoon(0)
    })
  }

  private lookSoon(delayMs: number): void {
    if (this.looking !== null) {
      if (delayMs === 0) this.again = true
      return
    }
    if (this.timer !== null) {
      if (delayMs > 0) return
      clearTimeout(this.timer)
    }
    this.timer = setTimeout(() => {
      this.timer = null
      this.again = false
      this.looking = this.look()
        .catch(() => undefined)
        .finally(() => {
          this.looking = null
          if (this.waiting.size > 0) this.lookSoon(this.again ? 0 : this.pollMs)
        })
    }, delayMs)
  }

  /** One look: the lowest nonce's receipt, and if it is in, everyone's. A failed ask counts as not mined. */
  private async look(): Promise<void> {
    this.expire()
    let lowest: [Hash, Waiter] | null = null
    for (const entry of this.waiting) if (lowest === null || entry[1].nonce < lowest[1].nonce) lowest = entry
    if (lowest === null) return
    const first = await this.receipt(lowest[0])
    if (first === null) return
    this.hand(lowest[0], first)
    const rest = [...this.waiting.keys()]
    const receipts = await Promise.all(rest.map((hash) => this.receipt(hash)))
    for (const [i, hash] of rest.entries()) {
      const r = receipts[i]
      if (r != null) this.hand(hash, r)
    }
  }

  private expire(): void {
    const now = performance.now()
    for (const [hash, w] of this.waiting) {
      if (now < w.untilMs) continue
      this.waiting.delete(hash)
      w.resolve(null)
    }
  }

  private hand(hash: Hash, receipt: TransactionReceipt): void {
    const w = this.waiting.get(hash)
    this.waiting.delete(hash)
    w?.resolve(receipt)
  }

  private receipt(hash: Hash): Promise<TransactionReceipt | null> {
    return receiptOrNull(this.client, hash).catch(() => null)
  }
}
