export { ExactAptosScheme } from "./scheme";
