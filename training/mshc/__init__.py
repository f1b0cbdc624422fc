"""MSHC: multi-scale hierarchical compression (Jung & Jung, 2026), one stage per module.

The pipeline runs on the frozen encoder's features, one stage after the other (paper, §3 and
Table 3): ``mrl`` (weighted Matryoshka head, Eq. 2, Table 5) → ``vq`` (soft-to-hard vector
quantisation, Eqs. 3–5; ``residual_vq`` and ``fsq`` are the alternatives the paper names as its
open problem) → ``pq`` (product quantisation, §3.4) → ``sae`` (sparse autoencoder, Eq. 6) →
``kd`` (distillation from the MRL teacher). ``pipeline`` trains them in order.
"""
