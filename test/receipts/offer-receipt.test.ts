// The x402 offer-receipt extension end to end, read by the published code: the 402's signed offers, the
// signed receipt in the paid answer's PAYMENT-RESPONSE, the public keys, and the final receipt at
// /receipts/:id signed over what the call delivered (body SHA-256) and was charged.
import { createHash } from 'node:crypto'
import { decodePaymentRequiredHeader, decodePaymentResponseHeader } from '@x402/core/http'
import {
  decodeSignedOffers,
  type EIP712SignedOffer,
  type EIP712SignedReceipt,
  extractOffersFromPaymentRequired,
  extractReceiptFromResponse,
  findAcceptsObjectFromSignedOffer,
  verifyOfferSignatureEIP712,
  verifyReceiptMatchesOffer,
  verifyReceiptSignatureEIP712,
} from '@x402/extensions/offer-receipt'
import { privateKeyToAccount, privateKeyToAddress } from 'viem/accounts'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { devAccount } from '../../src/chain/dev-accounts.ts'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { loadConfig } from '../../src/config/load.ts'
import { createLogger } from '../../src/observability/logger.ts'
import { type Service, startService } from '../../src/service.ts'
import { freshDatabaseUrl } from '../helpers/database.ts'
import { callReceiptSignature } from '../helpers/receipts.ts'
import { callApi } from '../helpers/service.ts'
import { startUpstream, type Upstream } from '../helpers/upstream.ts'
import { exactPayer } from '../helpers/x402-v2.ts'
import { registerMerchantKey, startBaseSepoliaChain } from '../x402/harness.ts'

const SIGNING_KEY = '0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba'
const OLD_SIGNER = '0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc'

describe('offer-receipt', () => {
  let chain: DevChain
  let svc: Service
  let upstream: Upstream
  let meteredUrl: string
  let settledUrl: string

  beforeAll(async () => {
    chain = await startBaseSepoliaChain()
    upstream = await startUpstream()
    const databaseUrl = await freshDatabaseUrl()
    const config = loadConfig({
      env: {
        NODE_ENV: 'test',
        NETWORK: 'base-sepolia',
        RPC_URL: chain.rpcUrl,
        USDC_ADDRESS: chain.usdcAddress,
        TREASURY_PRIVATE_KEY: chain.treasury.privateKey,
        RECEIPT_SIGNING_KEY: SIGNING_KEY,
        RECEIPT_PREVIOUS_SIGNERS: OLD_SIGNER,
        // Lets an endpoint settle before the answer (anvil's account 8: gas, no payer, not the treasury).
        SETTLER_PRIVATE_KEY: devAccount(8).privateKey,
        ...(databaseUrl ? { DATABASE_URL: databaseUrl } : {}),
      },
      overrides: { database: { data_dir: 'memory://' }, proxy: { allow_private_upstreams: true } } as never,
    })
    svc = await startService(config, { logger: createLogger('warn') })
    const merchantKey = await registerMerchantKey(svc.url, chain.payers[4]!.address, 'Signed Co')
    const ep = await callApi(svc.url, '/api/v1/endpoints', {
      key: merchantKey,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01 },
    })
    meteredUrl = ep.body.metered_url
    const early = await callApi(svc.url, '/api/v1/endpoints', {
      key: merchantKey,
      body: { upstream_url: `${upstream.url}/echo`, price: 0.01, x402_settlement: 'before_answer' },
    })
    settledUrl = early.body.metered_url
  })
  afterAll(async () => {
    await svc?.stop()
    await upstream?.close()
    await chain?.stop()
  })

  it('serves the signing key and the rotated-out ones', async () => {
    const r = await fetch(`${svc.url}/.well-known/x402-receipt-keys.json`)
    const keys = await r.json()
    expect(keys.current.address).toBe(privateKeyToAddress(SIGNING_KEY))
    expect(keys.current.kid).toBe(`did:pkh:eip155:1:${privateKeyToAddress(SIGNING_KEY)}`)
    expect(keys.previous.map((k: { address: string }) => k.address)).toEqual([OLD_SIGNER])
  })

  it('the 402 carries one signed offer per requirement, verified by the published code', async () => {
    const r = await fetch(meteredUrl)
    const required = decodePaymentRequiredHeader(r.headers.get('payment-required')!)
    const offers = extractOffersFromPaymentRequired(required)
    expect(offers).toHaveLength(required.accepts.length)
    for (const offer of offers) {
      const { signer, payload } = await verifyOfferSignatureEIP712(offer as EIP712SignedOffer)
      expect(signer).toBe(privateKeyToAddress(SIGNING_KEY))
      expect(payload.resourceUrl).toBe(meteredUrl)
      expect(payload.validUntil).toBeGreaterThan(Date.now() / 1000)
    }
    const [decoded] = decodeSignedOffers(offers)
    expect(findAcceptsObjectFromSignedOffer(decoded!, required.accepts)).toEqual(required.accepts[0])
    // A changed amount no longer recovers our key.
    const forged = { ...(offers[0] as EIP712SignedOffer) }
    forged.payload = { ...forged.payload, amount: '1' }
    expect((await verifyOfferSignatureEIP712(forged)).signer).not.toBe(privateKeyToAddress(SIGNING_KEY))
  })

  it('the paid answer’s receipt verifies and matches the offer; a tampered receipt fails', async () => {
    const payer = privateKeyToAccount(chain.payers[0]!.privateKey)
    const offerResponse = await fetch(meteredUrl)
    const [offer] = decodeSignedOffers(
      extractOffersFromPaymentRequired(
        decodePaymentRequiredHeader(offerResponse.headers.get('payment-required')!),
      ),
    )
    const paid = await exactPayer(payer).fetch(`${meteredUrl}?q=signed`)
    expect(paid.status).toBe(200)
    const body = Buffer.from(await paid.arrayBuffer())
    const receipt = extractReceiptFromResponse(paid) as EIP712SignedReceipt
    expect(receipt).toBeDefined()
    const { signer, payload } = await verifyReceiptSignatureEIP712(receipt)
    expect(signer).toBe(privateKeyToAddress(SIGNING_KEY))
    expect(payload.payer.toLowerCase()).toBe(payer.address.toLowerCase())
    expect(verifyReceiptMatchesOffer(receipt, offer!, [payer.address])).toBe(true)
    const tampered = { ...receipt, payload: { ...receipt.payload, resourceUrl: `${meteredUrl}/other` } }
    expect((await verifyReceiptSignatureEIP712(tampered)).signer).not.toBe(privateKeyToAddress(SIGNING_KEY))

    // The final receipt: what was delivered (the body's SHA-256) and charged, signed by the same key.
    await svc.flushCaptures()
    const final = await (await fetch(`${svc.url}/receipts/${paid.headers.get('x-receipt-id')}`)).json()
    expect(final.delivered).toEqual({
      body_sha256: createHash('sha256').update(body).digest('hex'),
      body_bytes: body.length,
    })
    expect(final.upstream_status).toBe(200)
    expect(final.amount_atomic).toBe('10000')
    const p = final.signed.payload
    const { currentKey, message, recover } = await callReceiptSignature(svc.url, final.signed)
    expect(await recover(message)).toBe(currentKey)
    expect(p).toMatchObject({
      bodySha256: final.delivered.body_sha256,
      amountAtomic: '10000',
      upstreamStatus: 200,
    })
    expect(await recover({ ...message, bodySha256: '00'.repeat(32) })).not.toBe(currentKey)
  })

  it('settled before the answer: both signed receipts name the mined transaction and still verify', async () => {
    const payer = privateKeyToAccount(chain.payers[1]!.privateKey)
    const paid = await exactPayer(payer).fetch(settledUrl)
    expect(paid.status).toBe(200)
    await paid.arrayBuffer()
    const settlement = decodePaymentResponseHeader(paid.headers.get('payment-response')!)
    expect(settlement.success).toBe(true)
    expect(settlement.transaction).toMatch(/^0x[0-9a-f]{64}$/)
    // The offer-receipt receipt, verified by the published code, signs the transaction the answer names.
    const receipt = extractReceiptFromResponse(paid) as EIP712SignedReceipt
    const { signer, payload } = await verifyReceiptSignatureEIP712(receipt)
    expect(signer).toBe(privateKeyToAddress(SIGNING_KEY))
    expect(payload.transaction).toBe(settlement.transaction)
    const forged = { ...receipt, payload: { ...receipt.payload, transaction: `0x${'00'.repeat(32)}` } }
    expect((await verifyReceiptSignatureEIP712(forged)).signer).not.toBe(privateKeyToAddress(SIGNING_KEY))

    // The final receipt signs it too, once the receipt URL shows it settled.
    await svc.flushCaptures()
    const url = `${svc.url}/receipts/${paid.headers.get('x-receipt-id')}`
    await expect
      .poll(async () => (await (await fetch(url)).json()).settlement.status, { timeout: 5_000, interval: 50 })
      .toBe('settled')
    const final = await (await fetch(url)).json()
    expect(final.settlement.transaction).toBe(settlement.transaction)
    expect(final.signed.payload.settlementTx).toBe(settlement.transaction)
    const { currentKey, message, recover } = await callReceiptSignature(svc.url, final.signed)
    expect(await recover(message)).toBe(currentKey)
    expect(await recover({ ...message, settlementTx: `0x${'00'.repeat(32)}` })).not.toBe(currentKey)
  })
})
