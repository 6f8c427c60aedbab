def main():
    print(1)

main()
