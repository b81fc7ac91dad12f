// What a paid call's public receipt says of its settlement: before the chain used the payment, and after.
import { type Hex, recoverTypedDataAddress } from 'viem'
import { expect } from 'vitest'

/** Served, not settled yet: no transaction, block or place. */
export const PENDING_SETTLEMENT = {
  status: 'pending',
  transaction: null,
  block_number: null,
  confirmations: null,
  batch: null,
  error: null,
}

/**
 * Settled: the transaction that carries the payment, the block that mined it, its place among what that
 * transaction carries (index of count, as the chain logged it), and confirmations counted up to the head
 * (read after the receipt, so it bounds them from above).
 */
export async function expectSettledAt(
  settlement: { confirmations: number | null },
  q: {
    transaction: string
    block: bigint
    index: number
    count: number
    chain: { getBlockNumber(args: { cacheTime: number }): Promise<bigint> }
  },
): Promise<void> {
  const head = await q.chain.getBlockNumber({ cacheTime: 0 })
  expect(settlement).toMatchObject({
    status: 'settled',
    transaction: q.transaction,
    block_number: Number(q.block),
    batch: { transaction: q.transaction, index: q.index, count: q.count },
    error: null,
  })
  expect(settlement.confirmations).toBeGreaterThanOrEqual(1)
  expect(settlement.confirmations).toBeLessThanOrEqual(Number(head - q.block + 1n))
}

/**
 * A final receipt's signed CallReceipt against the keys the service publishes: its payload as signed (the
 * uint fields as bigints), and the address a payload recovers to with the receipt's signature, so a test
 * checks the payload as given recovers the current key and an altered one does not.
 */
export async function callReceiptSignature(svcUrl: string, signed: { payload: any; signature: Hex }) {
  const keys = await (await fetch(`${svcUrl}/.well-known/x402-receipt-keys.json`)).json()
  const p = signed.payload
  const message = {
    ...p,
    upstreamStatus: BigInt(p.upstreamStatus),
    bodyBytes: BigInt(p.bodyBytes),
    issuedAt: BigInt(p.issuedAt),
  }
  const recover = (m: typeof message) =>
    recoverTypedDataAddress({
      domain: keys.domains.call_receipt,
      types: keys.call_receipt_types,
      primaryType: 'CallReceipt',
      message: m,
      signature: signed.signature,
    })
  return { currentKey: keys.current.address as string, message, recover }
}
