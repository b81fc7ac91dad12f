// Our signed offers and receipts, checked by the published @x402/extensions offer-receipt code.
import {
  hashReceiptTypedData,
  verifyOfferSignatureEIP712,
  verifyReceiptSignatureEIP712,
} from '@x402/extensions/offer-receipt'
import { recoverTypedDataAddress } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { describe, expect, it } from 'vitest'
import { ReceiptSigner, receiptDigest } from '../../src/data-plane/receipt-signer.ts'

const KEY = '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d'

describe('receipt signer', () => {
  const signer = new ReceiptSigner({ privateKey: KEY, previous: [] })

  it('signs an offer the published code verifies to our address', async () => {
    const offer = signer.offer(0, {
      resourceUrl: 'https://api.example/m/ep_1',
      scheme: 'exact',
      network: 'eip155:8453',
      asset: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913',
      payTo: '0x000000000000000000000000000000000000dEaD',
      amount: '10000',
      validUntil: 2_000_000_000,
    })
    const { signer: recovered } = await verifyOfferSignatureEIP712(offer)
    expect(recovered).toBe(signer.address)
  })

  it('signs a receipt the published code verifies; a tampered one recovers another address', async () => {
    const receipt = signer.receipt({
      network: 'eip155:8453',
      resourceUrl: 'https://api.example/m/ep_1',
      payer: '0x1111111111111111111111111111111111111111',
      issuedAt: 1_800_000_000,
      transaction: '',
    })
    expect((await verifyReceiptSignatureEIP712(receipt)).signer).toBe(signer.address)
    const tampered = {
      ...receipt,
      payload: { ...receipt.payload, payer: '0x2222222222222222222222222222222222222222' },
    }
    expect((await verifyReceiptSignatureEIP712(tampered)).signer).not.toBe(signer.address)
  })

  it("writes the signature as viem's account signs the same receipt, cached hashes or not", async () => {
    const account = privateKeyToAccount(KEY)
    const payload = {
      network: 'eip155:8453',
      resourceUrl: 'https://api.example/m/ep_3',
      payer: '0x3333333333333333333333333333333333333333',
      issuedAt: 1_800_000_456,
    }
    // The same network, resource and payer again (their hashes looked up), another transaction each time.
    for (const transaction of ['0x01', '0x02', '']) {
      const receipt = signer.receipt({ ...payload, transaction })
      expect(receipt.signature).toBe(
        await account.signTypedData({
          domain: { name: 'x402 receipt', version: '1', chainId: 1 },
          types: {
            Receipt: [
              { name: 'version', type: 'uint256' },
              { name: 'network', type: 'string' },
              { name: 'resourceUrl', type: 'string' },
              { name: 'payer', type: 'string' },
              { name: 'issuedAt', type: 'uint256' },
              { name: 'transaction', type: 'string' },
            ],
          },
          primaryType: 'Receipt',
          message: { ...payload, version: 1n, issuedAt: BigInt(payload.issuedAt), transaction },
        }),
      )
    }
  })

  it('encodes the receipt digest as the published package hashes it', () => {
    const payload = {
      version: 1,
      network: 'eip155:84532',
      resourceUrl: 'https://api.example/m/ep_2?x=ü',
      payer: '0x1111111111111111111111111111111111111111',
      issuedAt: 1_800_000_123,
      transaction: '0xabc',
    }
    expect(receiptDigest(payload)).toBe(hashReceiptTypedData(payload))
  })

  it('signs the final call receipt under its published domain and types', async () => {
    const r = signer.callReceipt({
      receiptId: 'rcpt_x',
      resourceUrl: 'https://api.example/m/ep_1',
      network: 'eip155:8453',
      payer: '0x1111111111111111111111111111111111111111',
      scheme: 'exact',
      amountAtomic: '10000',
      upstreamStatus: 200,
      bodySha256: 'ab'.repeat(32),
      bodyBytes: 12,
      usage: '',
      agent: '{"signer":"acme","keyid":"k1","failure":null,"rule":0,"action":"multiplier"}',
      settlementTx: `0x${'cd'.repeat(32)}`,
      issuedAt: 1_800_000_000,
    })
    const keys = signer.publicKeys()
    const message = { ...r.payload, upstreamStatus: 200n, bodyBytes: 12n, issuedAt: 1_800_000_000n }
    const args = {
      domain: keys.domains.call_receipt,
      types: keys.call_receipt_types,
      primaryType: 'CallReceipt' as const,
    }
    expect(await recoverTypedDataAddress({ ...args, message, signature: r.signature })).toBe(signer.address)
    expect(
      await recoverTypedDataAddress({
        ...args,
        message: { ...message, amountAtomic: '1' },
        signature: r.signature,
      }),
    ).not.toBe(signer.address)
    // The settlement transaction is signed too: another one does not recover the signer.
    expect(
      await recoverTypedDataAddress({
        ...args,
        message: { ...message, settlementTx: `0x${'ef'.repeat(32)}` },
        signature: r.signature,
      }),
    ).not.toBe(signer.address)
    // So is who called: another signer does not recover it.
    expect(
      await recoverTypedDataAddress({
        ...args,
        message: { ...message, agent: message.agent.replace('acme', 'other') },
        signature: r.signature,
      }),
    ).not.toBe(signer.address)
  })
})
