// Fresh funded accounts on the shared test chain, so parallel test files never share a nonce.

import {
  type Address,
  createPublicClient,
  createWalletClient,
  encodeFunctionData,
  type Hex,
  http,
  type PrivateKeyAccount,
  parseAbi,
} from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { inject } from 'vitest'

export const erc20 = parseAbi([
  'function transfer(address to, uint256 value) returns (bool)',
  'function balanceOf(address) view returns (uint256)',
  'function mint(address to, uint256 value)',
  'function decimals() view returns (uint8)',
])

/** anvil's first account: deployer of the test USDC (its only minter), unlocked on the node. */
const DEPLOYER: Address = '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266'

export function chainClients() {
  const rpcUrl = inject('rpcUrl')
  const transport = http(rpcUrl)
  const publicClient = createPublicClient({ transport })
  return { rpcUrl, publicClient, usdc: inject('usdcAddress') as Address }
}

export interface Funded {
  account: PrivateKeyAccount
  privateKey: Hex
  address: Address
}

/** A new key with 10 ETH for gas and `usdcAtomic` of test USDC. */
export async function fundedAccount(usdcAtomic = 1_000_000_000n): Promise<Funded> {
  const { publicClient, usdc } = chainClients()
  const privateKey = generatePrivateKey()
  const account = privateKeyToAccount(privateKey)
  await publicClient.request({
    method: 'anvil_setBalance' as never,
    params: [account.address, '0x8ac7230489e80000'] as never,
  })
  if (usdcAtomic > 0n) {
    // eth_sendTransaction from the unlocked deployer with no nonce: the node assigns it. viem's writeContract
    // would fill in a nonce it read itself. Concurrent mints (in one file or several) can still be given the
    // same nonce by anvil ("replacement transaction underpriced", "nonce too low"): sent again, they pass.
    const send = () =>
      publicClient.request({
        method: 'eth_sendTransaction' as never,
        params: [
          {
            from: DEPLOYER,
            to: usdc,
            data: encodeFunctionData({
              abi: erc20,
              functionName: 'mint',
              args: [account.address, usdcAtomic],
            }),
          },
        ] as never,
      }) as Promise<Hex>
    let hash: Hex | null = null
    for (let attempt = 0; hash === null; attempt++) {
      try {
        hash = await send()
      } catch (err) {
        if (attempt >= 4 || !/underpriced|nonce too low|already known/i.test(String(err))) throw err
        await new Promise((r) => setTimeout(r, 20 * (attempt + 1)))
      }
    }
    await publicClient.waitForTransactionReceipt({ hash })
  }
  return { account, privateKey, address: account.address }
}

/** Sends `value` USDC (or another token) from payer to `to`; resolves once mined. */
export async function payUsdc(
  payer: Funded,
  to: Address,
  value: bigint,
  options: { token?: Address; wait?: boolean } = {},
): Promise<Hex> {
  const { rpcUrl, publicClient, usdc } = chainClients()
  const wallet = createWalletClient({ account: payer.account, transport: http(rpcUrl) })
  const hash = await wallet.writeContract({
    address: options.token ?? usdc,
    abi: erc20,
    functionName: 'transfer',
    args: [to, value],
    chain: null,
  })
  if (options.wait !== false) await publicClient.waitForTransactionReceipt({ hash })
  return hash
}

export async function usdcBalance(address: Address): Promise<bigint> {
  const { publicClient, usdc } = chainClients()
  return publicClient.readContract({ address: usdc, abi: erc20, functionName: 'balanceOf', args: [address] })
}
