// settlementOutcomes and uptoSettlementOutcomes read a receipt's logs by hand: what it must take, and what it must refuse to take as
// proof that money moved. The receipts of real settlements on anvil are in authorization-batcher.test.ts and
// upto-permit.test.ts.
import { type Address, encodeAbiParameters, type Hex, pad, toEventSelector } from 'viem'
import { describe, expect, it } from 'vitest'
import { AUTHORIZATION_BATCHER_ADDRESS, settlementOutcomes } from '../../src/chain/settle-batch.ts'
import type { StoredUptoPermit } from '../../src/chain/upto-permit.ts'
import { uptoSettlementOutcomes } from '../../src/chain/upto-settle.ts'

const usdc: Address = '0x036cbd53842c5426634e7929541ec2318f3dcf7e'
const otherToken: Address = '0x1111111111111111111111111111111111111111'
const used = toEventSelector('AuthorizationUsed(address,bytes32)')
const settled = toEventSelector('BatchSettled(address,uint256,uint256)')
const payer: Address = '0xAbCdEf0123456789abcdef0123456789ABCDEF01'
const nonces: Hex[] = [1, 2, 3, 4].map((n) => pad(`0x${n.toString(16)}` as Hex))
const authorizations = nonces.map((nonce) => ({ from: payer, nonce }))

type Log = { address: Address; topics: [Hex, ...Hex[]] | []; data: Hex }
const usedLog = (nonce: Hex, address: Address = usdc): Log => ({
  address,
  topics: [used, pad(payer.toLowerCase() as Hex), nonce],
  data: '0x',
})
const settledLog = (attempted: bigint, address: Address = AUTHORIZATION_BATCHER_ADDRESS): Log => ({
  address,
  topics: [settled, pad(usdc)],
  data: encodeAbiParameters([{ type: 'uint256' }, { type: 'uint256' }], [attempted, 0n]),
})
const receipt = (logs: Log[], to: Address = AUTHORIZATION_BATCHER_ADDRESS, status = 'success' as const) =>
  ({ status, to, logs }) as unknown as Parameters<typeof settlementOutcomes>[0]

describe('settlementOutcomes', () => {
  it('reads used, failed and unattempted from a batch receipt, whatever the case of the hex', () => {
    const upper = {
      ...usedLog(nonces[2]!),
      topics: usedLog(nonces[2]!).topics.map((t) => t.toUpperCase().replace('0X', '0x')),
    }
    const logs = [usedLog(nonces[0]!), upper as Log, settledLog(3n)]
    expect(settlementOutcomes(receipt(logs), { usdc, authorizations })).toEqual([
      'used',
      'failed',
      'used',
      'unattempted',
    ])
  })

  it('takes no AuthorizationUsed from another token, nor a malformed one, as money that moved', () => {
    const unpadded = {
      ...usedLog(nonces[1]!),
      topics: [used, `0x${'ff'.repeat(12)}${payer.slice(2)}`, nonces[1]!],
    }
    const withData = { ...usedLog(nonces[2]!), data: pad('0x01') }
    const short = { ...usedLog(nonces[3]!), topics: [used, pad(payer.toLowerCase() as Hex)] }
    const logs = [usedLog(nonces[0]!, otherToken), unpadded, withData, short, settledLog(4n)] as Log[]
    expect(settlementOutcomes(receipt(logs), { usdc, authorizations })).toEqual([
      'failed',
      'failed',
      'failed',
      'failed',
    ])
  })

  it('counts attempts only from the batcher itself', () => {
    const logs = [usedLog(nonces[0]!), settledLog(4n, otherToken), settledLog(1n)]
    expect(settlementOutcomes(receipt(logs), { usdc, authorizations })).toEqual([
      'used',
      'unattempted',
      'unattempted',
      'unattempted',
    ])
  })

  it('a single transfer attempted its one authorization; a reverted one moved nothing', () => {
    const one = [authorizations[0]!]
    expect(settlementOutcomes(receipt([usedLog(nonces[0]!)], usdc), { usdc, authorizations: one })).toEqual([
      'used',
    ])
    expect(settlementOutcomes(receipt([], usdc), { usdc, authorizations: one })).toEqual(['failed'])
    expect(settlementOutcomes(receipt([], usdc, 'reverted' as never), { usdc, authorizations: one })).toEqual(
      ['failed'],
    )
    expect(
      settlementOutcomes(receipt([usedLog(nonces[0]!)], AUTHORIZATION_BATCHER_ADDRESS, 'reverted' as never), {
        usdc,
        authorizations,
      }),
    ).toEqual(['unattempted', 'unattempted', 'unattempted', 'unattempted'])
  })
})

describe('uptoSettlementOutcomes', () => {
  const facilitator: Address = '0x2222222222222222222222222222222222222222'
  const permit = (nonce: bigint) =>
    ({ from: payer, token: usdc, to: otherToken, facilitator, nonce: nonce.toString() }) as StoredUptoPermit
  const items = [1n, 2n, 3n].map((n) => ({ permit: permit(n), amount: 500n }))
  const uptoSettled = (nonce: bigint, amount: bigint, address: Address = facilitator): Log => ({
    address,
    topics: [
      toEventSelector('UptoSettled(address,uint256,uint256)'),
      pad(payer.toLowerCase() as Hex),
      pad(`0x${nonce.toString(16)}`),
    ],
    data: encodeAbiParameters([{ type: 'uint256' }], [amount]),
  })
  const batchSettled = (attempted: bigint): Log => ({
    address: facilitator,
    topics: [toEventSelector('BatchSettled(uint256,uint256)')],
    data: encodeAbiParameters([{ type: 'uint256' }, { type: 'uint256' }], [attempted, 0n]),
  })

  it('reads what each permit settled for, and only from its facilitator, in well-formed logs', () => {
    const truncated = { ...uptoSettled(2n, 400n), data: '0x01' as Hex }
    const logs = [uptoSettled(1n, 400n), truncated, uptoSettled(3n, 300n, otherToken), batchSettled(2n)]
    expect(uptoSettlementOutcomes(receipt(logs, facilitator), { items })).toEqual([
      { status: 'settled', amount: 400n },
      { status: 'failed' },
      { status: 'unattempted' },
    ])
  })

  it('settled directly: only the token Transfer of the exact amount from the payer to the payee counts', () => {
    const transfer = (value: bigint, to: Address = otherToken): Log => ({
      address: usdc,
      topics: [
        toEventSelector('Transfer(address,address,uint256)'),
        pad(payer.toLowerCase() as Hex),
        pad(to),
      ],
      data: encodeAbiParameters([{ type: 'uint256' }], [value]),
    })
    const one = [{ permit: { ...permit(1n), facilitator: otherToken }, amount: 500n }]
    const direct = (logs: Log[]) => uptoSettlementOutcomes(receipt(logs, usdc), { items: one })
    expect(direct([transfer(500n)])).toEqual([{ status: 'settled', amount: 500n }])
    expect(direct([transfer(499n)])).toEqual([{ status: 'failed' }])
    expect(direct([transfer(500n, facilitator)])).toEqual([{ status: 'failed' }])
  })
})
