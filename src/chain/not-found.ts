// "Not there" and "could not ask" are different answers about a transaction (the verifier, payouts,
// settlements): a receipt that does not exist means it is not mined; a look-up that timed out means nothing.
// Treated alike, a mined payout whose receipt look-up failed read as "nonce used by another transaction" and
// its entries were batched to be paid again.
import {
  type Chain,
  type Client,
  formatTransactionReceipt,
  type Hash,
  TransactionNotFoundError,
  type TransactionReceipt,
  TransactionReceiptNotFoundError,
  type Transport,
} from 'viem'

/** The look-up's value, or null when the node says it has no such transaction or receipt; other errors throw. */
export async function nullIfNotFound<T>(lookup: Promise<T>): Promise<T | null> {
  try {
    return await lookup
  } catch (err) {
    if (err instanceof TransactionReceiptNotFoundError || err instanceof TransactionNotFoundError) return null
    throw err
  }
}

/**
 * A transaction's receipt, or null while it is not mined, asked as viem's getTransactionReceipt asks and
 * formatted as it formats (the chain's formatter), without the error viem builds for a receipt not there
 * yet: the settlers poll a pending transaction every few milliseconds, and each such error (its message
 * formatted, its stack captured) cost more than the look-up's own work (1.3 % of the facilitator's busy
 * time at 550 settlements a second). Other errors throw.
 */
export async function receiptOrNull(
  client: Pick<Client<Transport, Chain | undefined>, 'request' | 'chain'>,
  hash: Hash,
): Promise<TransactionReceipt | null> {
  const raw = await client.request({ method: 'eth_getTransactionReceipt', params: [hash] })
  if (raw === null) return null
  const format = client.chain?.formatters?.transactionReceipt?.format ?? formatTransactionReceipt
  return format(raw) as TransactionReceipt
}
