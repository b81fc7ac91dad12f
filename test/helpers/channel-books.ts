// Channels of x402 batch-settlement in the books alone (no chain): a deposit confirmed, and the served calls
// a holder writes with its vouchers, for the tests of src/books/channels.ts and of what settles them.
import { requestChannelOp, type VoucherCall } from '../../src/books/channels.ts'
import type { Sql } from '../../src/db/sql.ts'

export const CHANNEL_PAYER = '0x2222222222222222222222222222222222222222'
export const CHANNEL_OWNER = '0x1111111111111111111111111111111111111111'

/** Channel `id` with `amount` deposited and confirmed. */
export async function depositedChannel(db: Sql, id: string, amount: bigint): Promise<string> {
  await requestChannelOp(db, {
    id: `dep_${id}`,
    channelId: id,
    config: {},
    payer: CHANNEL_PAYER,
    kind: 'deposit',
    amount,
    calldata: '0x',
  })
  await db`UPDATE batch_channel_ops SET status = 'done' WHERE id = ${`dep_${id}`}`
  await db`UPDATE batch_channels SET balance_atomic = ${amount} WHERE channel_id = ${id}`
  return id
}

/** The call served under the channel's voucher for `calls` calls of `price`, to be written with it. */
export function servedCall(q: {
  channelId: string
  calls: bigint
  price: bigint
  accountId: string
}): VoucherCall {
  return {
    channelId: q.channelId,
    cumulative: q.calls * q.price,
    endpointId: 'ep_1',
    accountId: q.accountId,
    payer: CHANNEL_PAYER,
    amountAtomic: q.price,
    call: {
      callId: `call_${q.channelId.slice(-6)}_${q.calls}`,
      ownerWallet: CHANNEL_OWNER,
      ownerShareAtomic: (q.price * 95n) / 100n,
      feeAtomic: q.price - (q.price * 95n) / 100n,
      upstreamStatus: 200,
      method: 'GET',
    },
  }
}
