// A batch's gas limit: every item attempted, under EIP-7825's cap per transaction whatever it carries.
import { describe, expect, it } from 'vitest'
import { batchSettlementGas, MAX_TRANSACTION_GAS } from '../../src/chain/settle-batch.ts'

describe('batchSettlementGas', () => {
  it('gives each item its gas, a wallet to deploy its deployment too', () => {
    expect(batchSettlementGas(1)).toBe(370_000n)
    expect(batchSettlementGas(2, 1)).toBe(990_000n)
  })

  it('keeps the largest batch of EOA authorizations under the cap, and caps the rest', () => {
    // settlement.per_transaction is at most 100.
    expect(batchSettlementGas(100)).toBeLessThan(MAX_TRANSACTION_GAS)
    // Ten wallets to deploy among them would ask more: the batcher leaves what does not fit unattempted.
    expect(batchSettlementGas(100, 10)).toBe(MAX_TRANSACTION_GAS)
    expect(MAX_TRANSACTION_GAS).toBe(2n ** 24n)
  })
})
