// Which transactions tollgate sent itself. Its settlements (the leader's batches from the treasury, the
// settler slots' own, the facilitator's group commits, the channels' claims) move payers' money to the
// treasury like any transfer, and the chain shows them to anyone. That money is already the books' (x402
// calls, facilitated payments, checkout authorizations, channel vouchers, each booked through its own claim):
// taken for a customer's transfer, it would pay a second time, matched to a checkout payment by its amount or
// presented as a transaction-hash proof by whoever read the hash on chain. A customer's transfer is never sent
// by tollgate's keys, so the transaction's sender tells them apart, whatever the database recorded and when.
import type { Address } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { BATCH_SETTLEMENT_ADDRESS } from './batch-channel.ts'
import { type SettlerSeed, settlerSlotKey } from './settler-keys.ts'
import { sameAddress } from './transfer.ts'

/** The addresses tollgate sends from: the treasury and every settler slot's key, lowercase. */
export function ownSenders(o: { treasury: Address; seed: SettlerSeed | null; slots: number }): Set<string> {
  const own = new Set([o.treasury.toLowerCase()])
  if (o.seed === null) return own
  for (let slot = 0; slot < o.slots; slot++) {
    const key = settlerSlotKey(o.seed, slot)
    if (key !== null) own.add(privateKeyToAccount(key).address.toLowerCase())
  }
  return own
}

/** ownSenders, derived on first use (up to 1,024 slot keys) and kept. */
export function lazyOwnSenders(derive: () => Parameters<typeof ownSenders>[0]): () => ReadonlySet<string> {
  let own: Set<string> | null = null
  return () => {
    own ??= ownSenders(derive())
    return own
  }
}

/**
 * Whether a transfer to the treasury is money tollgate already booked: its transaction was sent from one of
 * `own` (ownSenders), or it comes from the channel contract, whose `settle` anyone may call but which moves
 * only what tollgate claimed of its channels' vouchers (claimed and settled in one multicall today, so nothing
 * is left for a stranger's call: this holds whatever that order becomes).
 */
export function isOwnMoney(t: { sender: Address; from: Address }, own: ReadonlySet<string>): boolean {
  return own.has(t.sender.toLowerCase()) || sameAddress(t.from, BATCH_SETTLEMENT_ADDRESS)
}
