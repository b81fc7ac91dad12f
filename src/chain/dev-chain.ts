// The local chain `NETWORK=local` runs on: anvil, the project's TestUSDC and Disperse deployed from
// account 0 (the treasury), and USDC minted to the demo payers (accounts 1..N) and to the treasury.
import {
  type Address,
  createWalletClient,
  defineChain,
  getContractAddress,
  type Hash,
  http,
  parseAbi,
} from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { waitForTransactionReceipt } from 'viem/actions'
import { spawnAnvil } from './anvil-process.ts'
import { disperseArtifact, testUsdcArtifact } from './contracts/artifacts.ts'
import { type DevAccount, devAccount } from './dev-accounts.ts'
import { ChainError } from './errors.ts'

export type { DevAccount } from './dev-accounts.ts'

export interface DevChainOptions {
  /** Default 31337, anvil's own. */
  chainId?: number
  port?: number
  payers: number
  /** USDC base units minted to each payer. */
  payerFunding: bigint
  /** USDC base units minted to the treasury, so refunds and payouts work from the first minute. */
  treasuryFunding?: bigint
  /** Interval mining; default automine (a block per transaction, at once). */
  blockTimeSeconds?: number
}

export interface DevChain {
  rpcUrl: string
  chainId: number
  usdcAddress: Address
  disperseAddress: Address
  treasury: DevAccount
  payers: DevAccount[]
  pid: number
  stop(): Promise<void>
}

const mintAbi = parseAbi(['function mint(address to, uint256 amount) returns (bool)'])
const DEFAULT_TREASURY_FUNDING = 1_000_000_000_000n // 1,000,000 USDC

export async function startDevChain(options: DevChainOptions): Promise<DevChain> {
  const chainId = options.chainId ?? 31337
  const treasury = devAccount(0)
  const payers = Array.from({ length: options.payers }, (_, i) => devAccount(i + 1))
  const anvil = await spawnAnvil({
    chainId,
    port: options.port,
    // anvil's default is 10 accounts; payers beyond account 9 need their ETH for gas too.
    accounts: Math.max(10, options.payers + 1),
    blockTimeSeconds: options.blockTimeSeconds,
  })
  try {
    const chain = defineChain({
      id: chainId,
      name: 'tollgate local',
      nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
      rpcUrls: { default: { http: [anvil.rpcUrl] } },
    })
    const wallet = createWalletClient({
      chain,
      account: privateKeyToAccount(treasury.privateKey),
      transport: http(anvil.rpcUrl),
      pollingInterval: 50,
    })
    // Fresh chain, known sender: the nonces are 0, 1, 2…, so the contract addresses are known up front and
    // every transaction can be sent without waiting for the one before.
    let nonce = 0
    const usdcAddress = getContractAddress({ from: treasury.address, nonce: BigInt(nonce) })
    const hashes: Hash[] = [
      await wallet.deployContract({
        abi: testUsdcArtifact.abi,
        bytecode: testUsdcArtifact.bytecode,
        nonce: nonce++,
        gas: 3_000_000n,
      }),
    ]
    const disperseAddress = getContractAddress({ from: treasury.address, nonce: BigInt(nonce) })
    hashes.push(
      await wallet.deployContract({
        abi: disperseArtifact.abi,
        bytecode: disperseArtifact.bytecode,
        nonce: nonce++,
        gas: 1_000_000n,
      }),
    )
    const grants: Array<[Address, bigint]> = [
      [treasury.address, options.treasuryFunding ?? DEFAULT_TREASURY_FUNDING],
      ...payers.map((p): [Address, bigint] => [p.address, options.payerFunding]),
    ]
    for (const [to, amount] of grants) {
      if (amount <= 0n) continue
      hashes.push(
        await wallet.writeContract({
          address: usdcAddress,
          abi: mintAbi,
          functionName: 'mint',
          args: [to, amount],
          nonce: nonce++,
          gas: 100_000n,
        }),
      )
    }
    if (options.blockTimeSeconds) await wallet.request({ method: 'evm_mine' as never })
    for (const hash of hashes) {
      const receipt = await waitForTransactionReceipt(wallet, { hash, timeout: 30_000 })
      if (receipt.status !== 'success') {
        throw new ChainError('TOLLGATE_ANVIL_START_FAILED', `dev chain set-up transaction ${hash} reverted`)
      }
    }
    return {
      rpcUrl: anvil.rpcUrl,
      chainId,
      usdcAddress,
      disperseAddress,
      treasury,
      payers,
      pid: anvil.pid,
      stop: anvil.stop,
    }
  } catch (err) {
    await anvil.stop()
    throw err
  }
}
