// "Not there" and "could not ask" are different answers about a transaction (the verifier, payouts,
// settlements): a receipt that does not exist means it is not mined; a look-up that timed out means nothing.
// Treated alike, a mined payout whose receipt look-up failed read as "nonce used by another transaction" and
// its entries were batched to be paid again.
import { TransactionNotFoundError, TransactionReceiptNotFoundError } from 'viem'

/** The look-up's value, or null when the node says it has no such transaction or receipt; other errors throw. */
export async function nullIfNotFound<T>(lookup: Promise<T>): Promise<T | null> {
  try {
    return await lookup
  } catch (err) {
    if (err instanceof TransactionReceiptNotFoundError || err instanceof TransactionNotFoundError) return null
    throw err
  }
}
