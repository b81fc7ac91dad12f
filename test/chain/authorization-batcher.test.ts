// The AuthorizationBatcher on a real anvil: its address is the deterministic deployer's CREATE2 address of
// this build (so a real network gets it with one transaction), a bad authorization never sinks its batch,
// and a batch short of gas leaves its tail unattempted and unused, to be sent again.
import {
  type Address,
  createPublicClient,
  createWalletClient,
  type Hex,
  http,
  serializeErc6492Signature,
} from 'viem'
import { generatePrivateKey, type LocalAccount, privateKeyToAccount } from 'viem/accounts'
import { afterAll, describe, expect, it } from 'vitest'
import { anvilSetCode, spawnAnvil } from '../../src/chain/anvil-process.ts'
import {
  createAuthorizationNonce,
  readAuthorizationState,
  signTransferAuthorization,
} from '../../src/chain/authorization.ts'
import { authorizationBatcherArtifact } from '../../src/chain/contracts/artifacts.ts'
import { DETERMINISTIC_DEPLOYER } from '../../src/chain/create2.ts'
import { devAccount } from '../../src/chain/dev-accounts.ts'
import { type StoredAuthorization, storedAuthorization } from '../../src/chain/settle.ts'
import {
  AUTHORIZATION_BATCHER_ADDRESS,
  batchSettlementGas,
  deployAuthorizationBatcher,
  hasAuthorizationBatcher,
  settlementOutcomes,
} from '../../src/chain/settle-batch.ts'
import { readTokenInfo } from '../../src/chain/usdc.ts'
import { chainClients, type Funded, fundedAccount, usdcBalance } from '../helpers/accounts.ts'
import { counterfactualSmartWallet } from './contracts/smart-wallet.ts'

const { rpcUrl, publicClient, usdc } = chainClients()
const stops: Array<() => Promise<void>> = []
afterAll(async () => {
  for (const stop of stops) await stop()
})

/**
 * `count` authorizations of 0.01 USDC from `payer` to `to`, in the form the claims table stores; `payer` may
 * be a wallet's signer (its address pays, its signTypedData signs: an ERC-6492 wrapper, say).
 */
async function authorizations(
  payer: Funded | { address: Address; signTypedData: LocalAccount['signTypedData'] },
  to: Address,
  count: number,
): Promise<StoredAuthorization[]> {
  const chainId = await publicClient.getChainId()
  const token = await readTokenInfo(publicClient, { address: usdc })
  const now = BigInt(Math.floor(Date.now() / 1000))
  return Promise.all(
    Array.from({ length: count }, async () => {
      const signer = 'account' in payer ? payer.account : (payer as LocalAccount)
      const { authorization, signature } = await signTransferAuthorization(signer, {
        usdc: { address: usdc, name: token.name, version: token.version },
        chainId,
        to,
        value: 10_000n,
        validAfter: 0n,
        validBefore: now + 600n,
        nonce: createAuthorizationNonce(),
      })
      return storedAuthorization(authorization, signature)
    }),
  )
}

/** Sends the batch from `sender` with the given gas limit and returns its receipt. */
async function settle(sender: Funded, items: StoredAuthorization[], gas: bigint) {
  const wallet = createWalletClient({ account: sender.account, transport: http(rpcUrl) })
  const hash = await wallet.writeContract({
    address: AUTHORIZATION_BATCHER_ADDRESS,
    abi: authorizationBatcherArtifact.abi,
    functionName: 'settle',
    args: [
      usdc,
      items.map((a) => ({
        ...a,
        value: BigInt(a.value),
        validAfter: BigInt(a.validAfter),
        validBefore: BigInt(a.validBefore),
      })),
    ],
    gas,
    chain: null,
  })
  return publicClient.waitForTransactionReceipt({ hash })
}

function used(a: StoredAuthorization): Promise<boolean> {
  return readAuthorizationState(publicClient, { usdc, authorizer: a.from as Address, nonce: a.nonce })
}

describe('AuthorizationBatcher', () => {
  it('deploys at the CREATE2 address the deterministic deployer gives this build, once', async () => {
    // A chain that never had it: anvil's own, with its CREATE2 factory and funded accounts.
    const anvil = await spawnAnvil({ chainId: 31_337, accounts: 1 })
    stops.push(anvil.stop)
    const fresh = createPublicClient({ transport: http(anvil.rpcUrl) })
    const wallet = createWalletClient({
      account: privateKeyToAccount(devAccount(0).privateKey),
      transport: http(anvil.rpcUrl),
    })
    expect(await hasAuthorizationBatcher(fresh)).toBe(false)

    const first = await deployAuthorizationBatcher(fresh, wallet)
    expect(first.status).toBe('deployed')
    const tx = first.status === 'deployed' ? first.tx : '0x'
    expect((await fresh.getTransactionReceipt({ hash: tx })).to?.toLowerCase()).toBe(DETERMINISTIC_DEPLOYER)
    expect(await hasAuthorizationBatcher(fresh)).toBe(true)
    expect(await deployAuthorizationBatcher(fresh, wallet)).toEqual({ status: 'present' })
  })

  it('says when the chain has no deterministic deployment proxy', async () => {
    const anvil = await spawnAnvil({ chainId: 31_337, accounts: 1 })
    stops.push(anvil.stop)
    await anvilSetCode(anvil.rpcUrl, DETERMINISTIC_DEPLOYER, '0x')
    const fresh = createPublicClient({ transport: http(anvil.rpcUrl) })
    const wallet = createWalletClient({
      account: privateKeyToAccount(devAccount(0).privateKey),
      transport: http(anvil.rpcUrl),
    })
    expect(await deployAuthorizationBatcher(fresh, wallet)).toEqual({ status: 'no_deployer' })
  })

  it('settles the good authorizations of a batch and reports the one that reverts, in order', async () => {
    const [payer, broke, sender] = await Promise.all([fundedAccount(), fundedAccount(0n), fundedAccount(0n)])
    const to = privateKeyToAccount(generatePrivateKey()).address
    const [first, [unfunded], last] = await Promise.all([
      authorizations(payer, to, 2),
      authorizations(broke, to, 1),
      authorizations(payer, to, 2),
    ])
    const items = [...first, unfunded!, ...last]

    const receipt = await settle(sender, items, batchSettlementGas(items.length))
    expect(receipt.status).toBe('success')
    expect(settlementOutcomes(receipt, { usdc, authorizations: items })).toEqual([
      'used',
      'used',
      'failed',
      'used',
      'used',
    ])
    expect(await Promise.all(items.map(used))).toEqual([true, true, false, true, true])
    expect(await usdcBalance(to)).toBe(40_000n)
  })

  it('short of gas, attempts a prefix and leaves the rest unattempted and unused; they settle in another batch', async () => {
    const [payer, sender] = await Promise.all([fundedAccount(), fundedAccount(0n)])
    const to = privateKeyToAccount(generatePrivateKey()).address
    const items = await authorizations(payer, to, 6)

    const short = await settle(sender, items, 400_000n)
    expect(short.status).toBe('success')
    const outcomes = settlementOutcomes(short, { usdc, authorizations: items })
    const attempted = outcomes.filter((o) => o === 'used').length
    expect(attempted).toBeGreaterThan(0)
    expect(attempted).toBeLessThan(items.length)
    expect(outcomes).toEqual(items.map((_, i) => (i < attempted ? 'used' : 'unattempted')))
    const rest = items.slice(attempted)
    expect(await Promise.all(rest.map(used))).toEqual(rest.map(() => false))

    const again = await settle(sender, rest, batchSettlementGas(rest.length))
    expect(settlementOutcomes(again, { usdc, authorizations: rest })).toEqual(rest.map(() => 'used'))
  })

  it('with too little gas for any item, attempts none and leaves them all unused', async () => {
    const [payer, sender] = await Promise.all([fundedAccount(), fundedAccount(0n)])
    const items = await authorizations(payer, privateKeyToAccount(generatePrivateKey()).address, 2)
    // Below ITEM_GAS from the start: the loop stops before its first item and says so (attempted 0).
    const receipt = await settle(sender, items, 150_000n)
    expect(receipt.status).toBe('success')
    expect(settlementOutcomes(receipt, { usdc, authorizations: items })).toEqual([
      'unattempted',
      'unattempted',
    ])
    expect(await Promise.all(items.map(used))).toEqual([false, false])
  })

  it('deploys a counterfactual wallet (ERC-6492) through its factory once, and settles it beside the others', async () => {
    const [payer, funder, sender] = await Promise.all([fundedAccount(), fundedAccount(), fundedAccount(0n)])
    const to = privateKeyToAccount(generatePrivateKey()).address
    const cf = await counterfactualSmartWallet({
      rpcUrl,
      usdc,
      funderKey: funder.privateKey,
      amountAtomic: 50_000n,
    })
    expect(await publicClient.getCode({ address: cf.wallet })).toBeUndefined()
    const [eoa, wallet, more] = await Promise.all([
      authorizations(payer, to, 1),
      authorizations(cf.signer as never, to, 2),
      authorizations(payer, to, 1),
    ])
    const items = [eoa[0]!, ...wallet, more[0]!]

    const receipt = await settle(sender, items, batchSettlementGas(items.length, 2))
    expect(receipt.status).toBe('success')
    expect(settlementOutcomes(receipt, { usdc, authorizations: items })).toEqual([
      'used',
      'used',
      'used',
      'used',
    ])
    expect(await publicClient.getCode({ address: cf.wallet })).toBeDefined()
    expect(await usdcBalance(cf.wallet)).toBe(30_000n)
    expect(await usdcBalance(to)).toBe(40_000n)
  })

  it('fails only its own item when a wrapper creates no wallet, names another, or does not decode', async () => {
    const [payer, funder, sender] = await Promise.all([fundedAccount(), fundedAccount(), fundedAccount(0n)])
    const to = privateKeyToAccount(generatePrivateKey()).address
    const cf = await counterfactualSmartWallet({
      rpcUrl,
      usdc,
      funderKey: funder.privateKey,
      amountAtomic: 50_000n,
    })
    const [good, [noWallet], [junk], after] = await Promise.all([
      authorizations(payer, to, 1),
      // The "factory" is an account with no code: the call succeeds and creates nothing.
      authorizations(
        {
          address: cf.wallet,
          signTypedData: async (m) =>
            serializeErc6492Signature({
              address: privateKeyToAccount(generatePrivateKey()).address,
              data: cf.factoryData,
              signature: await cf.owner.signTypedData(m as never),
            }),
        },
        to,
        1,
      ),
      // The suffix after bytes that are not an encoded wrapper.
      authorizations(
        {
          address: cf.wallet,
          signTypedData: async () => `0x${'ab'.repeat(40)}${'6492'.repeat(16)}` as Hex,
        },
        to,
        1,
      ),
      authorizations(payer, to, 1),
    ])
    const items = [good[0]!, noWallet!, junk!, after[0]!]
    const receipt = await settle(sender, items, batchSettlementGas(items.length, 2))
    expect(receipt.status).toBe('success')
    expect(settlementOutcomes(receipt, { usdc, authorizations: items })).toEqual([
      'used',
      'failed',
      'failed',
      'used',
    ])
    expect(await publicClient.getCode({ address: cf.wallet })).toBeUndefined()
    expect(await usdcBalance(cf.wallet)).toBe(50_000n)
  })

  it('does not attempt a wallet to deploy without the gas its deployment may need', async () => {
    const [funder, sender] = await Promise.all([fundedAccount(), fundedAccount(0n)])
    const to = privateKeyToAccount(generatePrivateKey()).address
    const cf = await counterfactualSmartWallet({
      rpcUrl,
      usdc,
      funderKey: funder.privateKey,
      amountAtomic: 50_000n,
    })
    const items = await authorizations(cf.signer as never, to, 1)
    // Enough for a plain item (ITEM_GAS), not for one with a deployment (ITEM_GAS + DEPLOY_GAS).
    const short = await settle(sender, items, 450_000n)
    expect(settlementOutcomes(short, { usdc, authorizations: items })).toEqual(['unattempted'])
    expect(await publicClient.getCode({ address: cf.wallet })).toBeUndefined()
    const again = await settle(sender, items, batchSettlementGas(1, 1))
    expect(settlementOutcomes(again, { usdc, authorizations: items })).toEqual(['used'])
  })
})
