// The sign-in's wallet check (src/chain/verify-wallet-message.ts) on anvil, through an RPC proxy: a deployed
// ERC-1271 wallet's owner signing is a yes, a stranger signing for it is a no, and a node whose eth_call
// fails is neither: the check throws (the sign-in answers 503, retry) instead of telling the wallet no, which
// viem's verifyMessage alone would (it answers false for a failed call).
import { createPublicClient, http } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { afterAll, beforeAll, expect, it } from 'vitest'
import type { DevChain } from '../../src/chain/dev-chain.ts'
import { ChainUnavailable, verifyWalletMessage } from '../../src/chain/verify-wallet-message.ts'
import { startTestChain } from '../helpers/anvil.ts'
import { type RpcProxy, startRpcProxy } from '../helpers/rpc-proxy.ts'
import { fundedSmartWallet } from './contracts/smart-wallet.ts'

let chain: DevChain
let rpc: RpcProxy

beforeAll(async () => {
  // Base Sepolia's id: the wallet fixture deploys with that chain.
  chain = await startTestChain({ chainId: 84532, payers: 2 })
  rpc = await startRpcProxy(chain.rpcUrl)
})
afterAll(async () => {
  await rpc?.close()
  await chain?.stop()
})

it("believes a wallet's no only when the node answers calls", async () => {
  const { wallet, owner } = await fundedSmartWallet({
    rpcUrl: chain.rpcUrl,
    usdc: chain.usdcAddress,
    funderKey: chain.payers[0]!.privateKey,
    amountAtomic: 1n,
  })
  const client = createPublicClient({ transport: http(rpc.url, { retryCount: 0 }) })
  const message = 'tollgate.test wants you to sign in with your Ethereum account'
  const check = async (signer: { signMessage(q: { message: string }): Promise<`0x${string}`> }) =>
    verifyWalletMessage(client, {
      address: wallet,
      message,
      signature: await signer.signMessage({ message }),
      timeoutMs: 5_000,
    })
  const stranger = privateKeyToAccount(generatePrivateKey())
  expect(await check(owner)).toBe(true)
  expect(await check(stranger)).toBe(false)
  rpc.failMethods = ['eth_call']
  try {
    await expect(check(owner)).rejects.toBeInstanceOf(ChainUnavailable)
    await expect(check(stranger)).rejects.toBeInstanceOf(ChainUnavailable)
  } finally {
    rpc.failMethods = []
  }
  expect(await check(owner)).toBe(true)
})
