// What /verify found valid, held a few seconds for the /settle of the same body that a merchant's middleware
// sends right after: that /settle does not recover the signature again nor read the nonce and the balance
// again (the verdict's read serves the claim: its payer reservation counts every authorization settled after
// the block the read reflects, so an older read is as exact there). Each verdict serves one /settle; a miss
// (another instance, expired, a retry) checks everything as before. A nonce used elsewhere in between costs
// only that authorization's attempt in its batch (the batcher tries each on its own) and its /settle answers
// the outcome the settlement job finds; nothing moves twice, the claim is still the bound.
import { createHash } from 'node:crypto'
import { LRUCache } from 'lru-cache'
import type { BalanceRead } from '../chain/check-authorization.ts'
import type { Checked } from './facilitator-check.ts'

/** How long a verdict serves its /settle: the middleware settles once its handler answered. */
const VERDICT_TTL_MS = 10_000
const VERDICTS_MAX = 20_000
/** Time settlement needs before validBefore, as /verify checked it (src/chain/authorization.ts). */
const MIN_VALID_SECONDS = 6n

export type ExactChecked = Checked & { ok: true; kind: 'eip3009' }

export interface Verdict {
  checked: ExactChecked
  balance: BalanceRead
}

export class FacilitatorVerdicts {
  private readonly held = new LRUCache<string, Verdict>({
    max: VERDICTS_MAX,
    ttl: VERDICT_TTL_MS,
    ttlAutopurge: false,
  })

  /**
   * The key of one account's request body as it arrived (the middleware's client sends /verify and /settle
   * the same serialized body), with the wallet the verdict's custody was decided against: a wallet changed in
   * between checks everything again. The raw bytes, not the parsed body serialized again (JSON.stringify of
   * the payload cost 3.4 % of the facilitator's busy time under load): the same bytes parse to the same
   * payload, and a body sent with other bytes (keys reordered, spaces) only misses and is checked in full.
   */
  static keyOf(account: { id: string; wallet_address: string }, rawBody: Uint8Array): string {
    const digest = createHash('sha256').update(rawBody).digest('base64')
    return `${account.id}:${account.wallet_address.toLowerCase()}:${digest}`
  }

  hold(key: string, verdict: Verdict): void {
    this.held.set(key, verdict)
  }

  /** The verdict, once, while its authorization still leaves settlement its time; null: check it all. */
  take(key: string, nowSeconds: bigint): Verdict | null {
    const verdict = this.held.get(key)
    if (verdict === undefined) return null
    this.held.delete(key)
    const a = verdict.checked.authorization
    if (BigInt(a.validBefore) < nowSeconds + MIN_VALID_SECONDS) return null
    return verdict
  }
}
