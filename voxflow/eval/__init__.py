"""Quality checks: ASR word error rate, speaker similarity, output identity."""
