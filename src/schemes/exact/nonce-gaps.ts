// Keeps the settler's nonces without a hole. The settler counts its nonces itself (no round trip per group),
// so a transaction the node drops leaves a gap: every later one it sends waits behind it, forever, and the
// calls they carry go unsettled until the backlog throttle stops all x402 calls. A node drops what it
// accepted: anvil when the fee cap fell under the base fee by the time the transaction could be mined
// (checked: ten transactions gone, the three sent after them queued for good), a real node when its pool is
// full or it restarts.
//
// So each nonce broadcast is noted here; while some are out, the chain's mined nonce is read once a second.
// When it has not moved for STALL_MS and the node no longer knows the transaction at that nonce (nor the
// ones after it, up to the first it knows), each missing nonce is filled with an empty transfer to the
// settler itself at current fees. The authorizations the dropped transactions carried are not sent again
// from here: their captures name a hash the chain never mined, which the leader's settlement job finds
// and settles from the treasury (as for any transaction lost before mining).
import type { Hash, PrivateKeyAccount } from 'viem'
import type { ChainPublicClient } from '../../chain/client.ts'
import { keccakHex } from '../../chain/keccak.ts'
import { broadcast, type FeeQuote } from '../../chain/payouts.ts'
import type { Logger } from '../../observability/logger.ts'

/** A mined nonce that has not moved this long while later ones are out: look for a gap (a block or two). */
const STALL_MS = 5_000
const CHECK_EVERY_MS = 1_000
/** Gas of a plain transfer: what an empty one to oneself costs. */
const TRANSFER_GAS = 21_000n

export interface NonceGapsOptions {
  client: ChainPublicClient
  account: PrivateKeyAccount
  chainId: number
  quote: () => Promise<FeeQuote>
  logger: Logger
  /** Tests shorten it; production keeps STALL_MS. */
  stallMs?: number
}

export class NonceGaps {
  /** Nonces broadcast and not yet seen mined, with the hash sent at each. */
  private readonly out = new Map<number, Hash>()
  private timer: NodeJS.Timeout | null = null
  private checking: Promise<void> | null = null
  private mined = -1
  private minedSinceMs = 0
  /** Gaps filled since start (a metric and the tests read it). */
  filled = 0

  constructor(private readonly o: NonceGapsOptions) {}

  /** A transaction of the settler's was accepted by the node at `nonce`. */
  sent(nonce: number, hash: Hash): void {
    this.out.set(nonce, hash)
    this.timer ??= setInterval(() => this.tick(), CHECK_EVERY_MS)
  }

  stop(): Promise<void> {
    if (this.timer !== null) clearInterval(this.timer)
    this.timer = null
    return this.checking ?? Promise.resolve()
  }

  private tick(): void {
    if (this.checking !== null) return
    this.checking = this.check()
      .catch((err) => this.o.logger.warn('settler nonce check failed; trying again', { err }))
      .finally(() => {
        this.checking = null
      })
  }

  /** One look: forgets what is mined, and fills the gap at the mined nonce if it stalled on one. */
  async check(now = performance.now()): Promise<void> {
    const { client, account } = this.o
    const mined = await client.getTransactionCount({ address: account.address, blockTag: 'latest' })
    for (const n of this.out.keys()) if (n < mined) this.out.delete(n)
    if (this.out.size === 0) {
      if (this.timer !== null) clearInterval(this.timer)
      this.timer = null
      this.mined = -1
      return
    }
    if (mined !== this.mined) {
      this.mined = mined
      this.minedSinceMs = now
      return
    }
    if (now - this.minedSinceMs < (this.o.stallMs ?? STALL_MS)) return
    const missing = await this.missingFrom(mined)
    if (missing.length > 0) await this.fill(missing)
    this.minedSinceMs = now
  }

  /** The nonces from `mined` on whose transaction the node does not know, up to the first it does. */
  private async missingFrom(mined: number): Promise<number[]> {
    const last = Math.max(...this.out.keys())
    const missing: number[] = []
    for (let n = mined; n <= last; n++) {
      const hash = this.out.get(n)
      // A nonce never noted here (sent before a restart, or signed and never broadcast) counts as missing:
      // nothing of ours holds it, and the ones after it wait all the same.
      if (hash !== undefined && (await this.known(hash))) break
      missing.push(n)
    }
    return missing
  }

  /** Whether the node holds the transaction (pooled or mined); a failed look-up throws (it proves nothing). */
  private async known(hash: Hash): Promise<boolean> {
    const tx = await this.o.client.request({ method: 'eth_getTransactionByHash', params: [hash] })
    return tx !== null
  }

  private async fill(nonces: number[]): Promise<void> {
    const fees = await this.o.quote()
    for (const nonce of nonces) {
      const rawTx = await this.o.account.signTransaction({
        type: 'eip1559',
        chainId: this.o.chainId,
        to: this.o.account.address,
        value: 0n,
        nonce,
        gas: TRANSFER_GAS,
        maxFeePerGas: fees.maxFeePerGas,
        maxPriorityFeePerGas: fees.maxPriorityFeePerGas,
      })
      const r = await broadcast(this.o.client, rawTx)
      if (!r.ok && r.reason !== 'already_known') {
        // Taken meanwhile (mined after all) or refused: the next look sees which.
        this.o.logger.warn('settler nonce gap: filling it was refused', { nonce, reason: r.reason })
        return
      }
      this.out.set(nonce, keccakHex(rawTx))
      this.filled += 1
    }
    this.o.logger.warn(
      'settler nonce gap filled with empty transfers; the settlement job settles what it held',
      {
        nonces: `${nonces[0]}-${nonces[nonces.length - 1]}`,
        address: this.o.account.address,
      },
    )
  }
}
