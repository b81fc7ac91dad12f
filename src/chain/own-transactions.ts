// Which treasury inflows tollgate sent itself. Its settlement transactions (the leader's batches from the
// treasury, the settler slots' own, the facilitator's group commits) move payers' money to the treasury like
// any transfer, and the watcher reports them like any other. That money is already the books' (x402 calls,
// facilitated payments, checkout authorizations, each booked through its own claim): matched to a checkout
// payment by its amount, it would pay that payment with money that is not its own, counted twice. A
// customer's plain transfer is never sent by tollgate's keys, so the sender tells them apart, whatever the
// database recorded and whenever.
import type { Address, Hash } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { getTransaction } from 'viem/actions'
import type { ChainPublicClient } from './client.ts'
import { type SettlerSeed, settlerSlotKey } from './settler-keys.ts'

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

/**
 * The transactions among `hashes` sent from one of `senders` (lowercase hashes). One eth_getTransactionByHash
 * each, concurrent (a batching transport sends them as one request); a failed read throws, so the watcher's
 * range is reported again rather than a transaction taken for a customer's.
 */
export async function sentFrom(
  client: ChainPublicClient,
  hashes: readonly string[],
  senders: ReadonlySet<string>,
): Promise<Set<string>> {
  const txs = await Promise.all(hashes.map((hash) => getTransaction(client, { hash: hash as Hash })))
  const own = new Set<string>()
  for (const tx of txs) if (senders.has(tx.from.toLowerCase())) own.add(tx.hash.toLowerCase())
  return own
}
