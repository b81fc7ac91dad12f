// Money tollgate already booked, told apart on chain: sent from its own keys (its settlements), or moved out
// of the channel contract (whose `settle` anyone may call, but which pays the treasury only what tollgate
// claimed of its channels' vouchers). Either, presented as a transaction-hash proof or matched to a checkout
// payment, would pay a second time.
import type { Address } from 'viem'
import { describe, expect, it } from 'vitest'
import { BATCH_SETTLEMENT_ADDRESS } from '../../src/chain/batch-channel.ts'
import { isOwnMoney, ownSenders } from '../../src/chain/own-transactions.ts'

const treasury: Address = '0x1111111111111111111111111111111111111111'
const payer: Address = '0x2222222222222222222222222222222222222222'
const stranger: Address = '0x3333333333333333333333333333333333333333'
const own = ownSenders({ treasury, seed: null, slots: 0 })

describe('isOwnMoney', () => {
  it("is a transfer sent from tollgate's own key, whoever's money it moved", () => {
    expect(isOwnMoney({ sender: treasury, from: payer }, own)).toBe(true)
    expect(
      isOwnMoney({ sender: treasury.toUpperCase().replace('0X', '0x') as Address, from: payer }, own),
    ).toBe(true)
  })

  it("is a transfer out of the channel contract, whoever sent the transaction (settle is anyone's to call)", () => {
    expect(isOwnMoney({ sender: stranger, from: BATCH_SETTLEMENT_ADDRESS }, own)).toBe(true)
    expect(
      isOwnMoney({ sender: stranger, from: BATCH_SETTLEMENT_ADDRESS.toLowerCase() as Address }, own),
    ).toBe(true)
  })

  it("is not a payer's own transfer, sent by the payer or a relayer", () => {
    expect(isOwnMoney({ sender: payer, from: payer }, own)).toBe(false)
    expect(isOwnMoney({ sender: stranger, from: payer }, own)).toBe(false)
  })
})
