import sys, torch, lltm
case = sys.argv[1]
d = sys.argv[2] if len(sys.argv) > 2 else "cpu"
x=torch.randn(4,3,device=d,dtype=torch.float64); W=torch.randn(15,8,device=d,dtype=torch.float64); b=torch.randn(15,device=d,dtype=torch.float64); h=torch.randn(4,5,device=d,dtype=torch.float64); c=torch.randn(4,5,device=d,dtype=torch.float64)
if case=="rank_op": args=(x[:, :, None],W,b,h,c); f=torch.ops.lltm.lltm_forward
elif case=="rank": args=(x[:, :, None],W,b,h,c); f=lltm.lltm_cell
elif case=="dtype": args=(x,W,b.float(),h,c); f=lltm.lltm_cell
elif case=="shape": args=(x,W,b[:14],h,c); f=lltm.lltm_cell
elif case=="device": args=(x,W.to("cpu" if d=="cuda" else "cuda"),b,h,c); f=lltm.lltm_cell
try:
    f(*args); print(case, d, "NO ERROR")
except Exception as e:
    print(case, d, type(e).__name__, str(e).splitlines()[0])
